"""``python -m mpmd.schedule``: see `mpmd.schedule.cli`."""

import sys

from mpmd.schedule.cli import main

if __name__ == "__main__":
  sys.exit(main())
