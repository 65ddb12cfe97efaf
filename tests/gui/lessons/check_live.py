#!/usr/bin/env python3
"""A lesson step's live numbers against the trace the same run saved.

usage: check_live.py SIDECAR.json TRACE.json [SIDECAR.json TRACE.json ...]

The screenshot's sidecar says what the caption quoted (lesson.numbers) and at which
layer, head, query and key; this recomputes each from the saved trace JSON on its own:
the score is read from blocks.L.attn.scores, the mask from where the scores are -inf
(or the key is not there yet), the weight is the softmax of the row's scores computed
here, and the token and its probability come from the step's candidate table. Also: the
caption has no {name} left unfilled, and every number it quotes is in its text.
Exit 0 when every check passes; each failure is printed.
"""
import json
import math
import re
import sys


def fail(msg):
    print("FAIL " + msg)
    return 1


def row_scores(trace, layer, head, q):
    """The recorded scores of query position q at (layer, head), or None."""
    for st in trace["steps"]:
        t = len(st["input"])
        if st["pos0"] <= q < st["pos0"] + t:
            ten = st["tensors"].get("blocks.%d.attn.scores" % layer)
            if ten is None:
                return None
            h, rows, s = ten["shape"]
            r = q - st["pos0"]
            base = (head * rows + r) * s
            vals = ten["data"][base:base + s]
            return [float("-inf") if v == "-inf" else float(v) for v in vals]
    return None


def close(a, b, tol):
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return abs(a - b) <= tol


def check(side_path, trace_path):
    side = json.load(open(side_path))
    trace = json.load(open(trace_path))
    les = side.get("lesson")
    name = side_path
    if not les:
        return fail(name + ": no lesson in the sidecar")
    bad = 0
    left = re.findall(r"\{[a-z_]+\}", les["caption"])
    if left:
        bad |= fail("%s: the caption leaves %s unfilled: %s" % (name, left, les["caption"]))
    n = les["numbers"]
    if "step" not in n:
        return bad  # nothing generated (a step that was skipped)
    c = int(n["step"]) - 1
    layer, head, q, k = int(n["layer"]), int(n["head"]), int(n["pos"]), int(n["key"])
    if head >= 0 and "score" in n:
        row = row_scores(trace, layer, head, q)
        if row is None:
            bad |= fail("%s: the trace has no scores for layer %d at position %d" % (name, layer, q))
        else:
            score = row[k] if k < len(row) else float("-inf")
            masked = k >= len(row) or math.isinf(score)
            finite = [x for x in row if not math.isinf(x)]
            mx = max(finite)
            z = sum(math.exp(x - mx) for x in finite)
            weight = 0.0 if masked else math.exp(score - mx) / z
            want_score = "-inf" if math.isinf(score) else score
            if not close(n["score"], want_score, 1e-3):
                bad |= fail("%s: score %s, the trace says %s" % (name, n["score"], want_score))
            want_masked = "-inf" if masked else score
            if not close(n["masked"], want_masked, 1e-3):
                bad |= fail("%s: after the mask %s, the trace says %s" % (name, n["masked"], want_masked))
            if not close(n["weight"], weight, 2e-3):
                bad |= fail("%s: weight %s, the softmax of the trace's scores is %.5f" % (name, n["weight"], weight))
            if masked and n["weight"] != 0:
                bad |= fail("%s: a masked cell has weight %s" % (name, n["weight"]))
    sample = trace["steps"][c].get("sample")
    if sample and "prob" in n:
        cand = [x for x in sample["candidates"] if x["id"] == sample["token"]]
        if int(n.get("token_id", -1)) != sample["token"]:
            bad |= fail("%s: token %s, the trace drew %s" % (name, n.get("token_id"), sample["token"]))
        if not cand or not close(n["prob"], cand[0]["p_final"], 1e-4) or not close(n["p_raw"], cand[0]["p_raw"], 1e-4):
            bad |= fail("%s: prob %s and p_raw %s, the trace says %s" % (name, n["prob"], n["p_raw"], cand[0] if cand else None))
        top = max(sample["candidates"], key=lambda x: x["p_raw"])
        for key, field in (("top_prob", "p_raw"), ("top_temp", "p_temp"), ("top_final", "p_final")):
            if not close(n[key], top[field], 1e-4):
                bad |= fail("%s: %s %s, the trace says %s" % (name, key, n[key], top[field]))
    # Every value the caption quotes appears in it as the window wrote it.
    for key, text in les["values"].items():
        if "{" + key + "}" in les.get("template", "") and text not in les["caption"]:
            bad |= fail("%s: the caption does not show %s = %s" % (name, key, text))
    if not bad:
        print("ok %s: %d numbers checked" % (name, len(n)))
    return bad


def main():
    args = sys.argv[1:]
    if not args or len(args) % 2:
        print("usage: check_live.py SIDECAR.json TRACE.json [SIDECAR.json TRACE.json ...]")
        return 2
    bad = 0
    for i in range(0, len(args), 2):
        bad |= check(args[i], args[i + 1])
    return bad


if __name__ == "__main__":
    sys.exit(main())
