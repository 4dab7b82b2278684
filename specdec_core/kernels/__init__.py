"""Matmul kernels for CPU decoding: which kernel each linear calls for n token rows (`routes`), the
kernel table that measures that choice on this machine (`table`), and the weight-only quantised
linears (`quantised`)."""
from .quantised import Int4Linear, Int8Linear
from .routes import LEGACY, MAX_ROWS, NAMED, KernelTable, Route, apply_kernels, kernel_table, make_pack, using
from .table import TABLE_ENV, TABLES, load_or_measure, resolve_table, table_key

__all__ = ["Int4Linear", "Int8Linear", "LEGACY", "MAX_ROWS", "NAMED", "KernelTable", "Route", "apply_kernels",
           "kernel_table", "make_pack", "using", "TABLE_ENV", "TABLES", "load_or_measure", "resolve_table", "table_key"]
