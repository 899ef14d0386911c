"""Checks one batch invocation of scripts/run-local.sh against what its event should give.

    python3 scripts/check_outcomes.py LOG OFFSET EVENT RESPONSE OUTCOME...

Reads the function's JSON log LOG (`cargo lambda watch` output, AWS_LAMBDA_LOG_FORMAT=JSON)
from line OFFSET on, waiting (up to 20 s) for this batch's summary line rather than sleeping
a fixed time, then prints each record's outcome. OUTCOME... is the expected outcome of each
record of the EVENT file, in order; RESPONSE is the function's JSON response, whose
batchItemFailures must name exactly the records whose outcome is reported for retry.
Exits 1, saying what differs, when anything does.
"""
import json
import sys
import time

ACKNOWLEDGED = {"executed", "replayed", "unprotected", "failed_permanently"}


def record_ids(event):
    ids = []
    for record in event["Records"]:
        if "messageId" in record:
            ids.append(record["messageId"])
        elif "kinesis" in record:
            ids.append(record["kinesis"]["sequenceNumber"])
        else:
            ids.append(record["dynamodb"]["SequenceNumber"])
    return ids


def json_lines(path, offset):
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()[offset:]
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            yield json.loads(line[start:])
        except ValueError:
            continue


def fields(entry):
    return entry.get("fields", entry)


def wait_for_batch(path, offset, timeout_secs=20.0):
    deadline = time.monotonic() + timeout_secs
    while True:
        entries = [fields(e) for e in json_lines(path, offset)]
        if any(e.get("message") == "batch processed" for e in entries):
            return entries
        if time.monotonic() > deadline:
            sys.exit(f"no 'batch processed' line in {path} within {timeout_secs:.0f} s")
        time.sleep(0.1)


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    log, offset, event_path, response = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    expected = sys.argv[5:]
    with open(event_path) as f:
        ids = record_ids(json.load(f))
    if len(ids) != len(expected):
        sys.exit(f"{event_path} has {len(ids)} records, {len(expected)} outcomes expected")
    # An id can occur more than once in a batch (the same message delivered twice): each
    # id's outcomes are compared as a multiset, since concurrent records log in any order.
    logged = {}
    for entry in wait_for_batch(log, offset):
        if entry.get("message") in ("record processed", "record not processed", "record not started after an earlier failure"):
            logged.setdefault(entry.get("item_identifier"), []).append(entry.get("outcome"))
    problems = []
    for record_id in dict.fromkeys(ids):
        want = sorted(e for i, e in zip(ids, expected) if i == record_id)
        got = sorted(logged.get(record_id, []))
        mark = "" if got == want else f"   <- expected {' '.join(want)}"
        print(f"  {record_id}  {' '.join(got) or '<no log line>'}{mark}")
        if got != want:
            problems.append(f"{record_id}: {got or 'no log line'}, expected {want}")
    # Compared as sets: an id delivered twice in a batch needs naming once.
    reported = sorted({f["itemIdentifier"] for f in json.loads(response).get("batchItemFailures", [])})
    should = sorted({i for i, want in zip(ids, expected) if want not in ACKNOWLEDGED})
    if reported != should:
        problems.append(f"batchItemFailures {reported}, expected {should}")
    if problems:
        print("  MISMATCH: " + "; ".join(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
