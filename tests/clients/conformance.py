"""conformance.py - the parts of a conformance runner that do not depend on the client: reading
the case file, "$var.field" substitution, subset matching, reporting (tests/clients/README.md).
The Python runner (run_python.py) uses it; other languages' runners implement the same rules."""
import json
import sys

CLASSES = ("Error", "InvalidRequest", "NotFound", "Forbidden", "LimitExceeded", "Rejected",
           "Unreachable", "Suspended", "Conflict", "ExceedsCapacity")


def substitute(value, saved):
    """Replaces every string "$var.field[.sub...]" in `value` with that saved answer's field."""
    if isinstance(value, str) and value.startswith("$") and "." in value:
        var, *path = value[1:].split(".")
        if var not in saved:
            raise KeyError("%s: nothing was saved as %r" % (value, var))
        v = saved[var]
        for p in path:
            if not isinstance(v, dict) or p not in v:
                raise KeyError("%s: the saved answer has no %r" % (value, p))
            v = v[p]
        return v
    if isinstance(value, dict):
        return {k: substitute(v, saved) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, saved) for v in value]
    return value


def mismatch(expected, actual, where="answer"):
    """None when `expected` is a subset of `actual`, else a sentence saying where not."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return "%s: expected an object, got %r" % (where, actual)
        for k, v in expected.items():
            if k not in actual:
                return "%s.%s: missing (got %s)" % (where, k, json.dumps(actual)[:300])
            why = mismatch(v, actual[k], "%s.%s" % (where, k))
            if why:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return "%s: expected %r, got %r" % (where, expected, actual)
        for i, (e, a) in enumerate(zip(expected, actual)):
            why = mismatch(e, a, "%s[%d]" % (where, i))
            if why:
                return why
        return None
    if isinstance(expected, bool) or isinstance(actual, bool):
        same = isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    elif isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        same = expected == actual
    else:
        same = expected == actual
    return None if same else "%s: expected %r, got %r" % (where, expected, actual)


def run(cases_file, do_step, only=None):
    """Runs every case: do_step(op, args, options) returns ("ok", answer) or
    ("error", class_name, code, answer). Prints one line per case; returns the exit status."""
    with open(cases_file) as f:
        doc = json.load(f)
    failed = 0
    for case in doc["cases"]:
        if only and case["name"] not in only:
            continue
        saved, why = {}, None
        for i, step in enumerate(case["steps"]):
            try:
                args = substitute(step.get("args", {}), saved)
                expect = substitute(step["expect"], saved)
            except KeyError as e:
                why = "step %d (%s): %s" % (i + 1, step["op"], e)
                break
            got = do_step(step["op"], args, step.get("options", {}))
            if got[0] == "ok":
                answer = got[1]
                if "ok" not in expect:
                    why = "expected %s, got an answer %s" % (expect, json.dumps(answer)[:300])
                else:
                    why = mismatch(expect["ok"], answer)
            else:
                _, cls, code, answer = got
                if "error" not in expect:
                    why = "expected an answer, got %s (%s): %s" % (cls, code, answer.get(
                        "message", "") if isinstance(answer, dict) else answer)
                elif cls != expect["error"] or ("code" in expect and code != expect["code"]):
                    why = "expected %s (%s), got %s (%s)" % (expect["error"], expect.get("code"),
                                                           cls, code)
            if why:
                why = "step %d (%s): %s" % (i + 1, step["op"], why)
                break
            if step.get("save"):
                saved[step["save"]] = answer if isinstance(answer, dict) else {}
        if why:
            failed += 1
            print("FAIL %s: %s" % (case["name"], why))
        else:
            print("ok %s" % case["name"])
        sys.stdout.flush()
    print("%d of %d cases failed" % (failed, len(doc["cases"])) if failed else
          "all %d cases passed" % len(doc["cases"]))
    return 1 if failed else 0
