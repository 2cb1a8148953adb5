"""The output folder of a command that writes a report (`diff`, `impact`, `repair`).

As `suite run` does, a folder that already holds something is refused unless the command line says
what to do with it: `--overwrite` first removes what a previous run of the command wrote there (the
command's own file names, nothing else: a folder given by mistake keeps the user's files), and
`--resume` (commands with a journal) keeps it all and continues. Writing a new report beside the
previous run's plots, or over a folder of someone else's files, is never silent.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

from qverify.errors import InputError

SHOWN_ENTRIES = 3  # of a refused folder's contents, in the message


def add_output_options(parser: argparse.ArgumentParser, default: str, resume: str | None = None) -> None:
    """-o/--out DIR, --overwrite and, for a command with a journal, --resume (`resume`: its help)."""
    parser.add_argument(
        "-o", "--out", default=default, metavar="DIR", help=f"output folder (default {default})"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a previous run's files in the output folder"
    )
    if resume is not None:
        parser.add_argument("--resume", action="store_true", help=resume)


def prepare_output_folder(
    folder: Path, owned: Sequence[str], overwrite: bool, resume: bool | None = None
) -> None:
    """Create `folder`, or accept it as it is under the rules above. `owned`: glob patterns of the
    files and folders the command writes; `resume` None: the command has no --resume.

    :raises InputError: the folder holds something and neither flag was given, both were given, or
        the folder cannot be made.
    """
    if overwrite and resume:
        raise InputError("--overwrite and --resume exclude each other: start over, or continue the run")
    try:
        entries = sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []
        if entries and not (overwrite or resume):
            shown = ", ".join(entries[:SHOWN_ENTRIES]) + (", ..." if len(entries) > SHOWN_ENTRIES else "")
            flags = "--overwrite to replace it" + (
                " or --resume to continue it" if resume is not None else ""
            )
            raise InputError(
                f"output folder {folder} is not empty ({shown}): add {flags}, or give another folder"
            )
        if overwrite:
            for pattern in owned:
                for path in folder.glob(pattern):
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"output folder {folder}: {error.strerror or error}") from None
