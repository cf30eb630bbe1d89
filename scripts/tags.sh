#!/usr/bin/env bash
# tags.sh [--check | --list [FILE]]: the release tags from CHANGELOG.md's release headings.
#
# A release heading reads `## vX.Y.Z (COMMIT, YYYY-MM-DD): what it is`. The heading is the
# source of truth: tags may be lost when only a branch travels, the heading is not.
#
#   scripts/tags.sh           make every missing tag (annotated, its message the heading's text)
#   scripts/tags.sh --check   make nothing; fail if a heading's commit is unknown, its date is
#                             not the commit's, or an existing tag points elsewhere (CI runs
#                             it; outside a git clone it checks nothing, and in a shallow one it
#                             passes over the commits the clone lacks)
#   scripts/tags.sh --list [FILE]
#                             print "TAG COMMIT DATE" per heading, newest first, from FILE
#                             (default CHANGELOG.md; - reads stdin); needs no git objects
#
# It refuses, and makes no tag at all, when any check fails. Running it twice makes nothing the
# second time. A tag's date is its commit's, so tags made on two clones tell the same history.
set -euo pipefail

# The heading's pattern; tag, commit and date are its first three groups.
heading='^## (v[0-9]+\.[0-9]+\.[0-9]+) \(([0-9a-f]{7,40}), ([0-9]{4}-[0-9]{2}-[0-9]{2})\): (.*)$'

releases() { # FILE: "TAG COMMIT DATE TITLE" lines
	sed -En "s/${heading}/\1 \2 \3 \4/p" "$1"
}

mode=make
case "${1:-}" in
--list)
	# Before the cd below, so that a relative FILE means what the caller meant.
	releases "${2:-$(dirname "$0")/../CHANGELOG.md}" | cut -d' ' -f1-3
	exit 0
	;;
--check) mode=check ;;
"") ;;
*)
	echo "usage: scripts/tags.sh [--check | --list [FILE]]" >&2
	exit 2
	;;
esac

cd "$(dirname "$0")/.."
lines=$(releases CHANGELOG.md)
shallow=false
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	if [ "$mode" = check ]; then
		echo "tags.sh: not a git clone; nothing to check"
		exit 0
	fi
	echo "tags.sh: not a git clone" >&2
	exit 1
fi
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
	shallow=true
fi
if [ -z "$lines" ]; then
	echo "tags.sh: no release heading in CHANGELOG.md" >&2
	exit 1
fi

# First pass: every heading checked, nothing made, so a bad heading leaves no half-made set.
bad=0
todo=()
while read -r tag commit date title; do
	if ! full=$(git rev-parse -q --verify "${commit}^{commit}"); then
		if [ "$shallow" = true ] && [ "$mode" = check ]; then
			echo "skipped  $tag $commit (not in this shallow clone)"
			continue
		fi
		echo "tags.sh: $tag: commit $commit is not in this clone" >&2
		bad=1
		continue
	fi
	got=$(git show -s --format=%cd --date=format:%Y-%m-%d "$full")
	if [ "$got" != "$date" ]; then
		echo "tags.sh: $tag: commit $commit is of $got, the heading says $date" >&2
		bad=1
	fi
	if at=$(git rev-parse -q --verify "refs/tags/${tag}^{commit}"); then
		if [ "$at" != "$full" ]; then
			echo "tags.sh: $tag points at ${at:0:7}, CHANGELOG.md says ${full:0:7}; not moving it" >&2
			bad=1
		else
			echo "ok       $tag ${full:0:7}"
		fi
	else
		todo+=("$tag $full $title")
	fi
done <<<"$lines"
if [ "$bad" != 0 ]; then
	exit 1
fi
if [ "$mode" = check ]; then
	for t in "${todo[@]}"; do
		echo "missing  ${t%% *} (scripts/tags.sh makes it)"
	done
	exit 0
fi

for t in "${todo[@]}"; do
	read -r tag full title <<<"$t"
	GIT_COMMITTER_DATE=$(git show -s --format=%cI "$full") \
		git tag -a "$tag" -m "$tag: $title" "$full"
	echo "created  $tag ${full:0:7}"
done
