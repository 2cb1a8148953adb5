"""`python -m qverify` is the `qverify` command."""

from qverify.cli import console

console()
