#!/usr/bin/env bash
# Checks the shape of the source tree, naming each culprit:
#   - no folder-level include cycle in src/: a folder is the first path component under src/ (src/text/jinja/
#     belongs to text), and folder A depends on folder B when a file of A has `#include "B/..."`; a cycle is
#     printed with the include line behind each of its edges;
#   - no function over MAX_FUNCTION lines in src/**/*.c or *.cu (from the line its definition starts on to
#     its closing brace; a definition starts at the first column and its closing brace is a `}` there);
#   - src/train/trainer.c at most MAX_TRAINER lines.
# Usage: bash scripts/check_structure.sh [ROOT]   (ROOT: the repository; default the one this script is in)
# Exit 1 with one line per problem on stderr, 0 (silent) when the tree is in shape.
set -uo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root" || exit 2
MAX_FUNCTION=150
MAX_TRAINER=800
problems=0

# "FROM TO FILE:LINE" for every include of another folder of src/
folder_edges() {
    find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.def' \) -print0 |
        xargs -0 grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[A-Za-z0-9_.-]*/' |
        awk -F: '{
            split($1, parts, "/"); from = parts[2]
            to = $0; sub(/^[^"]*"/, "", to); sub(/\/.*/, "", to)
            if (to != from) print from, to, $1 ":" $2
        }' |
        while read -r from to where; do [ -d "src/$to" ] && echo "$from $to $where"; done
}

# One cycle for each set of folders that depend on each other (the shortest through the first folder of
# the set in sort order), with the include behind each edge.
find_cycles() {
    awk '
    { if (!(($1, $2) in why)) { why[$1, $2] = $3; n_out[$1]++; out[$1, n_out[$1]] = $2 }; nodes[$1] = 1; nodes[$2] = 1 }
    # breadth first from s: parent[] of every folder reached; 1 when s is reached again (the cycle closes)
    function shortest_cycle(s,    head, tail, queue, node, i, next_node, seen) {
        split("", parent)
        head = 1; tail = 1; queue[1] = s
        while (head <= tail) {
            node = queue[head++]
            for (i = 1; i <= n_out[node]; i++) {
                next_node = out[node, i]
                if (next_node == s) { parent[s] = node; return 1 }
                if (next_node in seen) continue
                seen[next_node] = 1; parent[next_node] = node; queue[++tail] = next_node
            }
        }
        return 0
    }
    # whether b can be reached from a
    function reaches(a, b,    head, tail, queue, node, i, next_node, seen) {
        head = 1; tail = 1; queue[1] = a; seen[a] = 1
        while (head <= tail) {
            node = queue[head++]
            for (i = 1; i <= n_out[node]; i++) {
                next_node = out[node, i]
                if (next_node == b) return 1
                if (!(next_node in seen)) { seen[next_node] = 1; queue[++tail] = next_node }
            }
        }
        return 0
    }
    END {
        n = 0
        for (s in nodes) sorted[++n] = s
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (sorted[j] < sorted[i]) { t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t }
        for (i = 1; i <= n; i++) {
            s = sorted[i]
            if ((s in done) || !shortest_cycle(s)) continue
            # the cycle, walked back from s through the parents
            k = 0; node = s
            do { path[++k] = node; node = parent[node] } while (node != s)
            text = s; edges = ""; prev = s
            for (m = k; m >= 1; m--) {
                text = text " -> " path[m]
                edges = edges (m < k ? "; " : "") why[prev, path[m]] " includes " path[m] "/"
                prev = path[m]
            }
            print "folder include cycle: " text " (" edges ")"
            # the other folders of the set are reported with it
            for (j = i + 1; j <= n; j++) if (reaches(s, sorted[j]) && reaches(sorted[j], s)) done[sorted[j]] = 1
        }
    }'
}

# "FILE:LINE: function NAME is N lines" for every function longer than MAX_FUNCTION
long_functions() {
    find src -type f \( -name '*.c' -o -name '*.cu' \) -print0 | sort -z | xargs -0 awk -v max="$MAX_FUNCTION" '
    FNR == 1 { in_fn = 0; start = 0 }
    # a definition: at the first column, a name and "(" before any "=", not a declaration of a type
    !in_fn && start == 0 && /^[A-Za-z_]/ && !/^(typedef|struct|union|enum|extern "C")[^(]*$/ &&
        index($0, "(") > 0 && (index($0, "=") == 0 || index($0, "=") > index($0, "(")) {
        start = FNR; head = $0
    }
    start && !in_fn {
        code = $0
        sub(/[[:space:]]*(\/\*.*\*\/|\/\/.*)[[:space:]]*$/, "", code)
        if (code ~ /\{/ && code ~ /\}[[:space:]]*$/) { start = 0; next }   # a definition on one line
        if (code ~ /\{[[:space:]]*$/) { in_fn = 1; next }
        if (code ~ /;[[:space:]]*$/) { start = 0; next }                   # a declaration
        if (FNR - start > 20) start = 0                                    # not a definition after all
        next
    }
    in_fn && /^}/ {
        n = FNR - start + 1
        if (n > max) {
            name = head
            gsub(/__launch_bounds__\([^)]*\)/, "", name)
            sub(/\(.*/, "", name)
            sub(/.*[^A-Za-z0-9_]/, "", name)
            printf "%s:%d: function %s is %d lines (at most %d)\n", FILENAME, start, name, n, max
        }
        in_fn = 0; start = 0
    }'
}

# report TEXT...: one problem per line of TEXT
report() {
    local line
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        echo "check_structure: $line" >&2
        problems=$((problems + 1))
    done <<< "$1"
}

cycles=$(folder_edges | find_cycles | sort) || { echo "check_structure: the include scan failed" >&2; exit 2; }
report "$cycles"
long=$(long_functions) || { echo "check_structure: the function scan failed" >&2; exit 2; }
report "$long"

trainer=src/train/trainer.c
if [ -f "$trainer" ]; then
    n=$(wc -l < "$trainer")
    if [ "$n" -gt "$MAX_TRAINER" ]; then
        echo "check_structure: $trainer is $n lines (at most $MAX_TRAINER)" >&2
        problems=$((problems + 1))
    fi
fi

[ "$problems" -eq 0 ] || { echo "check_structure: $problems problem(s)" >&2; exit 1; }
