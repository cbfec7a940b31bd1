"""Seed corpora for the fuzz targets, from the JSON Schemas' examples (schemas/*/examples).

  FuzzEventDecoder   every notification-event example, valid and invalid, as is
  FuzzErrorResponse  the error response each delivery-error example with a gateway status stands for
                     (command 8, status, its source offset as the identifier), one file each and all in a row
  FuzzFeedback       the feedback tuple each feedback-event example stands for (timestamp, token length, token),
                     one file each and all in a row, and the row cut short
"""
import glob
import json
import os
import struct
import sys

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
out = sys.argv[1]


def write(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


for path in sorted(glob.glob(f"{root}/schemas/notification-event/examples/*/*.json")):
    kind = os.path.basename(os.path.dirname(path))
    with open(path, "rb") as f:
        write("FuzzEventDecoder", f"{kind}-{os.path.basename(path)}", f.read())

responses = []
for path in sorted(glob.glob(f"{root}/schemas/delivery-error-event/examples/valid/*.json")):
    example = json.load(open(path))
    if example.get("status") is not None:
        data = struct.pack(">BBI", 8, example["status"], example["source"]["offset"] % 2**32)
        responses.append(data)
        write("FuzzErrorResponse", os.path.basename(path), data)
write("FuzzErrorResponse", "all-in-a-row", b"".join(responses))
write("FuzzErrorResponse", "shutdown-10", struct.pack(">BBI", 8, 10, 4242))

tuples = []
for path in sorted(glob.glob(f"{root}/schemas/feedback-event/examples/valid/*.json")):
    example = json.load(open(path))
    token = bytes.fromhex(example["token"])
    data = struct.pack(">IH", example["timestamp_unix"], len(token)) + token
    tuples.append(data)
    write("FuzzFeedback", os.path.basename(path), data)
row = b"".join(tuples)
write("FuzzFeedback", "all-in-a-row", row)
write("FuzzFeedback", "cut-short", row[:-3])
for target in ("FuzzEventDecoder", "FuzzErrorResponse", "FuzzFeedback"):
    print(f"{target}: {len(os.listdir(os.path.join(out, target)))} seeds")
