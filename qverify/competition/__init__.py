"""VNN-COMP categories: run one as the competition does, and score results files by its rules.

- `category`: the rows of an `instances.csv` (or a project suite) through `qverify.vnncomp`'s
  `prepare_instance`/`run_instance`, on the suite runner's executors, journaled and resumable,
  into the competition's results CSV and witness files;
- `results`: the results CSV, and the result words as the competition's scoring reads them;
- `witness`: a sat witness checked as the competition checks it (onnxruntime, tolerance 1e-4);
- `scoring`: a category's scores per tool (correct, incorrect, open, time bonus) from several
  tools' results, disagreements settled by the witnesses (SCORING/process_results.py);
- `compare`: finding other tools' results files, and the report (`score.md`, `score.json`).

`qverify vnncomp category` (qverify.cli.cmd_vnncomp) is the command.
"""
