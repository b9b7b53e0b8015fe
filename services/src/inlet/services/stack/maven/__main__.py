import sys

from inlet.services.stack.maven import main

sys.exit(main())
