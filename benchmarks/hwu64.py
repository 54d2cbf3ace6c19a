"""HWU64 (Liu et al., 2019, "Benchmarking Natural Language Understanding Services for
building Conversational Agents"; CC BY 4.0) in CLINC150's layout, so `benchmarks/clinc150.py`
runs the ticket product on a second public intent set: 64 intents of a home assistant, the
first cross-validation fold (9,960 training and 1,076 test utterances), no out-of-scope ones.

Get it with the search tool's `fetch github:xliuhw/NLU-Evaluation-Data`, then

    .venv/bin/python benchmarks/hwu64.py <mirror>/repo /tmp/hwu64.json
    .venv/bin/python benchmarks/clinc150.py /tmp/hwu64.json --out /tmp/hwu64
"""

import argparse
import json
import subprocess
from pathlib import Path

FOLD = (  # the Rasa-format merge of the first fold: 80% to train, the rest to test
    "CrossValidation/out4RasaReal/rasa_json_2018_03_22-13_01_25_169_80Train/"
    "CrossValidation/KFold_1/"
)


def examples(git_dir: Path, path: str) -> list[list[str]]:
    text = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found = json.loads(text)["rasa_nlu_data"]["common_examples"]
    return [[e["text"].strip(), e["intent"]] for e in found if e["text"].strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", type=Path, help="the fetched mirror's git directory")
    parser.add_argument("out", type=Path, help="where to write the CLINC150-shaped JSON")
    args = parser.parse_args()
    names = subprocess.run(
        ["git", "--git-dir", str(args.git_dir), "ls-tree", "-r", "--name-only", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    (train,) = [n for n in names if n.startswith(f"{FOLD}merged/RasaNlu_Merged_KFold_1")]
    (test,) = [n for n in names if n.startswith(f"{FOLD}mergedTestset/RasaNluTestset")]
    data = {
        "train": examples(args.git_dir, train),
        "val": [],
        "test": examples(args.git_dir, test),
        "oos_train": [],
        "oos_test": [],
    }
    args.out.write_text(json.dumps(data), encoding="utf-8")
    intents = {label for _, label in data["train"]}
    print(f"HWU64: {len(data['train'])} training, {len(data['test'])} test, {len(intents)} intents")


if __name__ == "__main__":
    main()
