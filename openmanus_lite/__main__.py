from openmanus_lite.cli import main

raise SystemExit(main())
