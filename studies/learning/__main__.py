"""``python -m studies.learning``: the study's command line (``studies/learning/study.py``)."""

import sys

from evolm.errors import EvolmError
from studies.learning.study import main

try:
    main()
except EvolmError as e:  # what the user can mend (a built-in judge not installed, say): one line and exit 2,
    print(f"studies.learning: error: {e}", file=sys.stderr)  # as the evolm command says it
    sys.exit(2)
