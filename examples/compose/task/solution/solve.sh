#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import os
import urllib.request

request = urllib.request.Request(os.environ["NOTES_URL"] + "/notes/greeting",
                                 data=b"hello from main", method="PUT")
urllib.request.urlopen(request, timeout=10)
PY
