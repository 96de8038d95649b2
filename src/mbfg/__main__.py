import sys

from mbfg.cli import main

sys.exit(main())
