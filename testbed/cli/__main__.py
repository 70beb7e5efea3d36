"""``python -m testbed.cli`` = ``mqbed``."""

from testbed.cli import main

main()
