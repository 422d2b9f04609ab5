from dwc.cli import main

raise SystemExit(main())
