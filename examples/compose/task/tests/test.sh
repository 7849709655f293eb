#!/bin/bash
# Reads the note back from the notes sidecar: 1 when the agent stored it there.
got=$(python3 -c "
import urllib.request
print(urllib.request.urlopen('http://notes:8080/notes/greeting', timeout=10).read().decode())
" 2>&1) || true
echo "the notes service holds: ${got}"
if [ "$got" = "hello from main" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
