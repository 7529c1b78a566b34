from fusionlens.cli import main

raise SystemExit(main())
