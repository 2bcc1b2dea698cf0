"""Entry point of the frozen binary (PyInstaller runs this file as __main__)."""
import sys

from cronrd.cli import main

sys.exit(main(prog_name="cronrd"))
