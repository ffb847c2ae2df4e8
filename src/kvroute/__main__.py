"""``python -m kvroute`` and the ``kvroute`` command: compiled code enabled
(:func:`kvroute._accel.enable`), then the CLI, imported only after it."""

from kvroute import _accel


def main() -> None:
    """Run the command line."""
    _accel.enable()
    from kvroute.cli.main import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
