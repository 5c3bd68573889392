"""`python -m derive.fuzz`: see derive.fuzz."""
import sys

from derive.fuzz.runner import main

sys.exit(main())
