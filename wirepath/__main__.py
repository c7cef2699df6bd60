"""``python -m wirepath``."""

import sys

from wirepath.cli import main

sys.exit(main())
