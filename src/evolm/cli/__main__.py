"""``python -m evolm.cli`` (and ``torchrun -m evolm.cli train ...``): the ``evolm`` command."""

import sys

from evolm.cli import main

sys.exit(main())
