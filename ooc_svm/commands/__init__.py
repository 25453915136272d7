"""Sub-commands of ``ooc-svm`` (one module each: ``add_parser(subparsers)``, ``run(args)``)."""
