"""`python -m mpmd.options_doc [PATH]`: rewrites the partitioning options
table of docs/api.md (PATH, default `docs/api.md` of the working directory)
from the one table of options (`mpmd.options.docs_table`)."""

from __future__ import annotations

import pathlib
import sys

from mpmd import options


def main(argv: list[str]) -> int:
  """Rewrites the table in place; prints the path written."""
  path = pathlib.Path(argv[0] if argv else "docs/api.md")
  path.write_text(options.with_docs_table(path.read_text()))
  print(path)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
