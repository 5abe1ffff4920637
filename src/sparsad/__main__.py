from sparsad.cli import main

raise SystemExit(main())
