"""``python -m cgbench``: the same command line as the ``cgbench`` console script."""

from cgbench.cli.entry import main

if __name__ == "__main__":
    main()
