#!/usr/bin/env bash
# ab.sh [options] REF_A [REF_B] [-- COMPARE_FLAGS...]: cmd/compare of two commits, alternated in
# one sitting, and the paired ratios A/B (bench/README.md, "A against B: bench/ab.sh").
#
# Each ref's own cmd/compare (its bench module and its library) is built from a detached
# temporary git worktree. The two binaries then run alternately, A B A B ..., each as
#   compare -systems conveyor,raw -jobs J -rounds R -json-out FILE COMPARE_FLAGS...
# and cmd/abreport prints, for each metric, A, B and A/B per pair and the median over pairs.
#
# REF_B defaults to the last release before REF_A: the newest v* tag on REF_A's history other
# than REF_A itself, or, in a clone without tags, the newest release heading of REF_A's
# CHANGELOG.md whose commit is an ancestor of REF_A. A ref is a commit (a release's name works
# without its tag, through the CHANGELOG heading): uncommitted changes are not measured.
#
# Options:
#   -pairs N    pairs of runs (default 3)
#   -jobs N     jobs per workload (default 100000)
#   -rounds N   compare's rounds per run (default 2)
#   -out DIR    where the JSON files, the runs' output and the report go (default: a new
#               temporary directory, printed; it is kept)
#   -keep       keep the worktrees and the binaries (their directory is printed)
#   -smoke      the whole path at its smallest: -pairs 1 -jobs 1000 -rounds 1, REF_A and
#               REF_B HEAD unless named, and REF_A's last release resolved and printed
# Flags after -- go to compare as they are; a flag given again there wins (-systems too).
set -euo pipefail

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}
die() {
	echo "ab.sh: $*" >&2
	exit 2
}

pairs=3 jobs=100000 rounds=2 out="" keep=0 smoke=0
refs=() extra=()
while [ $# -gt 0 ]; do
	case "$1" in
	-pairs | -jobs | -rounds | -out)
		[ $# -ge 2 ] || die "$1 needs a value"
		case "$1" in
		-pairs) pairs=$2 ;;
		-jobs) jobs=$2 ;;
		-rounds) rounds=$2 ;;
		-out) out=$2 ;;
		esac
		shift 2
		;;
	-keep) keep=1 && shift ;;
	-smoke) smoke=1 && shift ;;
	-h | -help | --help) usage && exit 0 ;;
	--) shift && extra=("$@") && break ;;
	-*) die "unknown option $1 (compare's flags go after --)" ;;
	*) refs+=("$1") && shift ;;
	esac
done
if [ "$smoke" = 1 ]; then
	pairs=1 jobs=1000 rounds=1
	[ ${#refs[@]} -gt 0 ] || refs=(HEAD HEAD)
fi
for n in "$pairs" "$jobs" "$rounds"; do
	[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "-pairs, -jobs and -rounds take a positive number, not '$n'"
done
[ ${#refs[@]} -ge 1 ] && [ ${#refs[@]} -le 2 ] || {
	usage >&2
	exit 2
}

root=$(cd "$(dirname "$0")/.." && git rev-parse --show-toplevel) || die "not inside a git work tree"
git() { command git -C "$root" "$@"; }
# commit_of REF: REF's full commit; a release name a clone lacks the tag of (vX.Y.Z) is read
# from the CHANGELOG.md release headings.
commit_of() {
	local tag commit _
	if git rev-parse -q --verify "$1^{commit}"; then
		return 0
	fi
	while read -r tag commit _; do
		if [ "$tag" = "$1" ]; then
			git rev-parse -q --verify "$commit^{commit}"
			return
		fi
	done < <(bash "$root/scripts/tags.sh" --list)
	return 1
}

# last_release COMMIT: "NAME COMMIT" of the newest release before COMMIT (not COMMIT itself).
last_release() {
	local c=$1 tag from=$1 tags file
	for from in "$c" "$c^"; do
		if tag=$(git describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' "$from" 2>/dev/null) &&
			[ "$(commit_of "$tag")" != "$c" ]; then
			echo "$tag $(commit_of "$tag")"
			return 0
		fi
	done
	# No tag: the release headings (scripts/tags.sh --list), REF_A's own, else this checkout's.
	tags="$root/scripts/tags.sh"
	for file in "$c:CHANGELOG.md" ""; do
		while read -r tag commit _; do
			full=$(commit_of "$commit") || continue
			if [ "$full" != "$c" ] && git merge-base --is-ancestor "$full" "$c"; then
				echo "$tag $full"
				return 0
			fi
		done < <(if [ -n "$file" ]; then git show "$file" 2>/dev/null | bash "$tags" --list -; else bash "$tags" --list; fi)
	done
	return 1
}

a=$(commit_of "${refs[0]}") || die "REF_A '${refs[0]}' is not a commit here"
nameA=${refs[0]}
if [ ${#refs[@]} = 2 ]; then
	b=$(commit_of "${refs[1]}") || die "REF_B '${refs[1]}' is not a commit here"
	nameB=${refs[1]}
else
	read -r nameB b < <(last_release "$a") || die "no release before ${refs[0]}: name REF_B"
fi
if [ "$smoke" = 1 ]; then
	rel=$(last_release "$a") || die "no release before ${refs[0]}: tags and CHANGELOG.md headings both gave none"
	echo "ab.sh: the last release before ${refs[0]} is ${rel%% *} (${rel##* })"
fi
labelA="$nameA (${a:0:7})"
labelB="$nameB (${b:0:7})"

work=$(mktemp -d "${TMPDIR:-/tmp}/ab.XXXXXX")
made_out=0
[ -n "$out" ] || { out=$(mktemp -d "${TMPDIR:-/tmp}/ab-out.XXXXXX") && made_out=1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
trees=()
cleanup() {
	# A directory of ours that nothing was written to (a failure before the first run) goes.
	[ "$made_out" = 0 ] || rmdir "$out" 2>/dev/null || true
	if [ "$keep" = 1 ]; then
		echo "ab.sh: kept the worktrees and binaries in $work" >&2
		return
	fi
	for t in "${trees[@]}"; do
		git worktree remove --force "$t" >/dev/null 2>&1 || true
	done
	git worktree prune
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "ab.sh: A = $labelA, B = $labelB; output in $out" >&2

# The report's tool comes from this checkout, whatever the refs hold.
(cd "$root/bench" && go build -o "$work/abreport" ./cmd/abreport)

# build SIDE COMMIT: compare of COMMIT, as $work/compare-SIDE.
build() {
	local side=$1 commit=$2 tree="$work/tree-$1" f
	git worktree add --detach -q "$tree" "$commit"
	trees+=("$tree")
	# Before cmd/compare's READY wait grew, a cold start of a consumer child could outlast it.
	f="$tree/bench/cmd/compare/workload.go"
	if grep -q 'c.await(ctx, "READY", 30\*time.Second' "$f"; then
		sed -i 's/c.await(ctx, "READY", 30\*time.Second/c.await(ctx, "READY", 600*time.Second/' "$f"
		echo "ab.sh: $side: READY wait raised from 30 s to 600 s in its worktree" >&2
	fi
	echo "ab.sh: building $side's compare (${commit:0:7})" >&2
	(cd "$tree/bench" && go build -trimpath -o "$work/compare-$side" ./cmd/compare)
}
build A "$a"
build B "$b"

files=()
for i in $(seq "$pairs"); do
	for side in A B; do
		json="$out/pair$i-$side.json" log="$out/pair$i-$side.log"
		echo "ab.sh: pair $i of $pairs, $side" >&2
		rm -f "$json"
		rc=0
		"$work/compare-$side" -systems conveyor,raw -jobs "$jobs" -rounds "$rounds" \
			-json-out "$json" "${extra[@]}" >"$log" 2>&1 || rc=$?
		if [ ! -s "$json" ]; then
			tail -n 20 "$log" >&2
			echo "ab.sh: compare $side exited $rc and wrote no JSON (its output: $log)" >&2
			exit 1
		fi
		[ "$rc" = 0 ] || echo "ab.sh: compare $side exited $rc (a workload failed); the report lists its errors" >&2
		files+=("$json")
	done
done

cmd="bench/ab.sh -pairs $pairs -jobs $jobs -rounds $rounds ${refs[*]}"
[ ${#extra[@]} = 0 ] || cmd+=" -- ${extra[*]}"
{
	echo "\`$cmd\`"
	echo
	echo "A = $a, B = $b"
	echo
	"$work/abreport" -a "$labelA" -b "$labelB" "${files[@]}"
} >"$out/report.md"
"$work/abreport" -json -a "$labelA" -b "$labelB" "${files[@]}" >"$out/report.json"
cat "$out/report.md"
echo "ab.sh: JSON, the runs' output and the report (report.md, report.json) are in $out" >&2
