"""``python -m kvroute``: the same as the ``kvroute`` command."""

from kvroute.cli.main import main

if __name__ == "__main__":
    main()
