#!/bin/sh
# Prints, for each test that failed in the given make check lane logs, the
# last lines it wrote (before its --- FAIL line with go test -v, after it
# without), and the failed packages and make targets: the lanes run side by side,
# so a failure in one is otherwise buried under the others' output, and a
# CI log often keeps only its end.
# Usage: scripts/check-failures.sh LOG...
set -eu
lines=${CHECK_FAILURE_LINES:-25}
for log in "$@"; do
	[ -s "$log" ] || continue
	awk -v lines="$lines" -v lane="$(basename "$log" .log)" '
	{
		line = $0
		sub(/^[a-z0-9]+\| /, "", line) # the lane prefix
	}
	line ~ /^=== (RUN|NAME|CONT|PAUSE) +Test[^ ]*$/ {
		split(line, f, " "); cur = f[3]; n[cur] += 0; after = 0; next
	}
	line ~ /^ *--- FAIL: Test/ {
		split(line, f, " "); name = f[3]
		printf "%s| %s: its last lines before --- FAIL:\n", lane, name
		k = n[name]; from = k > lines ? k - lines + 1 : 1
		for (i = from; i <= k; i++) print lane "|   " buf[name, i]
		print lane "| " line
		after = lines # without -v, go test prints the lines after the FAIL line
		next
	}
	after > 0 && line ~ /^    / && line !~ /^ *--- PASS/ { print lane "|   " line; after--; next }
	{ after = 0 }
	# Lines of a failing build outside go test (vet, lint, make).
	line ~ /^FAIL\t/ || line ~ /^make(\[[0-9]+\])?: \*\*\*/ { print lane "| " line; next }
	cur != "" && line !~ /^ *--- PASS/ && line !~ /^=== RUN/ { buf[cur, ++n[cur]] = line }
	' "$log"
done
