"""`python -m mpmd.knobs_doc [PATH]`: rewrites docs/environment.md (PATH,
default `docs/environment.md` of the working directory) from the table of
environment variables (`mpmd.knobs.markdown`); `--print` prints it instead."""

from __future__ import annotations

import pathlib
import sys

from mpmd import knobs


def main(argv: list[str]) -> int:
  """Rewrites the page (prints the path written), or prints it (`--print`)."""
  if argv[:1] == ["--print"]:
    sys.stdout.write(knobs.markdown())
    return 0
  path = pathlib.Path(argv[0] if argv else "docs/environment.md")
  path.write_text(knobs.markdown())
  print(path)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
