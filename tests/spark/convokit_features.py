"""Run inside a venv with ConvoKit (not M2MC's): HyperConvo's features of the utterances on stdin.

stdin: a JSON list of {"id", "speaker", "conversation_id", "reply_to", "timestamp"} in the
order the corpus should hold them; the file named by the one argument: {conversation_id:
{feature name: value}}, NaN as null. ConvoKit prints notices of its own to stdout (on first use,
"No configuration file found…"), so stdout carries no result.
"""

import json
import math
import sys


def main() -> None:
    from convokit import Corpus, Speaker, Utterance
    from convokit.hyperconvo import HyperConvo

    out_path = sys.argv[1]
    rows = json.load(sys.stdin)
    speakers = {row["speaker"]: Speaker(id=row["speaker"]) for row in rows}
    utterances = [
        Utterance(id=row["id"], speaker=speakers[row["speaker"]], conversation_id=row["conversation_id"],
                  reply_to=row["reply_to"], timestamp=row["timestamp"], text="")
        for row in rows
    ]
    features = HyperConvo().retrieve_feats(Corpus(utterances=utterances))

    def plain(value):
        value = float(value)
        return None if math.isnan(value) else value

    with open(out_path, "w", encoding="utf-8") as out:
        json.dump({convo: {name: plain(value) for name, value in feats.items()} for convo, feats in features.items()}, out)


if __name__ == "__main__":
    main()
