"""`python -m simpleai`: the same as the `simpleai` command."""

import sys

from simpleai.cli import main

sys.exit(main())
