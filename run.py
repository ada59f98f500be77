"""``python run.py --protocol NAME [options]``: the repository's entry point, the same command as the installed
``dyneval`` (see ``dyneval --help``)."""

from dyneval.__main__ import run

if __name__ == "__main__":
    run()
