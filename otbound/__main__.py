"""``python -m otbound``: the ``otbound`` command (:mod:`otbound.cli.main`)."""

from otbound.cli.main import run

if __name__ == "__main__":
    run()
