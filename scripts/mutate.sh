#!/usr/bin/env bash
# Mutation driver: applies one-line mutants from a table one at a time, runs the tests of the
# packages the table names for each, and prints whether the tests killed it.
#
#   bash scripts/mutate.sh [TABLE] [ID...]     (TABLE defaults to scripts/mutants.tsv)
#   bash scripts/mutate.sh --check [TABLE]     (finds every row's text; runs no test)
#
# TABLE is tab-separated, '#' starts a comment line, 8 fields a mutant:
#   id  file  line  original  replacement  packages  run  note
# The original is text of one line of the file; its first occurrence on that line is replaced.
# The line is found by the text, so comment edits above it do not break the row: the one line
# of the file that holds the text, or, when several do, the one nearest the recorded line (a
# tie is refused as ambiguous). A row whose file or text is gone is stale. --check reports,
# for every row, a text gone (with the files that hold it now), a tie, a repeated text whose
# recorded line does not hold it, and a line number that moved; it fails on all but the last.
# Replacement '<none>' deletes the text. Packages are comma-separated
# ('./internal/jobstate,./pipeline'). Run is a -run regexp, '-' for all tests.
# A note starting 'equivalent:' says why the mutant cannot change behaviour. A survivor so
# marked is counted equivalent, not survived.
# Results: killed (a test failed that passes without the mutant), survived, invalid (the
# tests do not compile), stale, flaky (the failing test fails without the mutant too).
# A Lua mutant that does not parse fails its tests at run time, and counts as killed. So
# replacements are checked to be valid Lua by hand.
# Score = killed / (valid - equivalent). Each file is copied aside before it is mutated. A trap
# restores it on exit or interrupt. At the end the script checks that every file it touched is
# back to what it was. Not -race, for speed; -failfast; logs in $MUTATE_LOGS (a temporary
# directory unless set).
set -u
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then
	check=1
	shift
fi
table=${1:-scripts/mutants.tsv}
shift || true

# locate FILE LINE ORIG: sets at, the line of FILE that holds ORIG (see the header), and
# where, a word on how it was found: exact (the recorded line), moved (the one line that
# holds it, elsewhere), nearest (several hold it, the recorded line not: the nearest), or,
# with a non-zero status, nofile, absent or ambiguous. why says it in a sentence.
locate() {
	at=0 where="" why=""
	if [ ! -f "$1" ]; then
		where=nofile why="$1 does not exist (moved?)$(elsewhere "$3")"
		return 1
	fi
	if [ -z "$3" ]; then
		where=absent why="the row's original text is empty"
		return 1
	fi
	local n best dist tie exact
	# ENVIRON, not -v: awk would read backslashes in -v values as escapes.
	read -r n best dist tie exact < <(ORIG=$3 LINE=$2 awk '
		index($0, ENVIRON["ORIG"]) {
			n++
			d = NR - ENVIRON["LINE"]; if (d < 0) d = -d
			if (best == "" || d < bd) { best = NR; bd = d; tie = 0 } else if (d == bd) tie = 1
			if (NR == ENVIRON["LINE"]) exact = 1
		}
		END { print n + 0, best + 0, bd + 0, tie + 0, exact + 0 }' "$1")
	at=$best
	if [ "$n" -eq 0 ]; then
		where=absent why="no line of $1 holds the original text$(elsewhere "$3")"
		return 1
	elif [ "$exact" = 1 ]; then
		where=exact why="line $2 holds it"
	elif [ "$n" -eq 1 ]; then
		where=moved why="the one line that holds it is $best, not $2"
	elif [ "$tie" = 1 ]; then
		where=ambiguous why="$n lines of $1 hold it, two of them $dist from line $2: give the right line"
		return 1
	else
		where=nearest why="$n lines of $1 hold it, line $2 none: took the nearest, $best"
	fi
	return 0
}

# elsewhere ORIG: ", found in FILE:LINE ..." for the tracked files that hold ORIG, or "".
elsewhere() {
	local hits
	hits=$(git grep -n -F -e "$1" -- '*.go' '*.lua' 2>/dev/null | cut -d: -f1,2 | head -5 | tr '\n' ' ')
	[ -n "$hits" ] && printf '; the text is in %s' "${hits% }"
}

if [ $check = 1 ]; then
	rows=0 bad=0 moved=0
	while IFS= read -r row <&3; do
		[[ -z "$row" || "$row" == \#* ]] && continue
		IFS=$'\t' read -r -a f <<<"$row"
		rows=$((rows + 1))
		if [ "${#f[@]}" -lt 7 ]; then
			echo "bad row (need 8 tab-separated fields): $row"
			bad=$((bad + 1))
			continue
		fi
		if ! locate "${f[1]}" "${f[2]}" "${f[3]}"; then
			printf '%-8s %-9s %s:%s: %s\n' "${f[0]}" "$where" "${f[1]}" "${f[2]}" "$why"
			bad=$((bad + 1))
		elif [ "$where" = nearest ]; then
			printf '%-8s %-9s %s:%s: %s (a guess: give the right line)\n' "${f[0]}" "$where" "${f[1]}" "${f[2]}" "$why"
			bad=$((bad + 1))
		elif [ "$where" = moved ]; then
			printf '%-8s %-9s %s:%s: %s\n' "${f[0]}" "$where" "${f[1]}" "${f[2]}" "$why"
			moved=$((moved + 1))
		fi
	done 3<"$table"
	echo "$rows rows: $((rows - bad)) found ($moved of them on another line than the table's), $bad not"
	[ $bad -eq 0 ]
	exit
fi
only=" $* "
logs=${MUTATE_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
aside=$(mktemp -d)
current=""
touched=()

restore() {
	if [ -n "$current" ]; then
		cp "$aside/orig" "$current"
		current=""
	fi
}
trap 'restore; rm -rf "$aside"' EXIT
trap 'exit 130' INT TERM HUP

# A Lua mutant needs no build. The scripts are embedded as text in the test binaries. So the
# unmutated binaries are built once (per package), and each Lua mutant patches its line into a
# copy of them. The line is padded with trailing spaces, or short of leading ones, to keep its
# length. Redis hashes the script the binary sends, so the patched text is what runs.
# MUTATE_FAST=0 builds every mutant instead.
mkdir -p "$aside/bin"
# patched LINE: from the original ($aside/orig) and mutated ($current) file, sets from_line
# and to_line, the line as the binary holds it and as it is to be, of the same length.
patched() {
	from_line=$(sed -n "$1p" "$aside/orig")
	to_line=$(sed -n "$1p" "$current")
	local d=$((${#from_line} - ${#to_line}))
	if [ $d -ge 0 ]; then
		to_line="$to_line$(printf '%*s' $d '')"
	else
		local lead=${to_line%%[! ]*}
		[ ${#lead} -ge $((-d)) ] || return 1
		to_line=${to_line:$((-d))}
	fi
	[ "$(wc -l <"$aside/orig")" -gt "$1" ]
}
# patch_binary BIN OUT: OUT is BIN (built from the unmutated tree once) with from_line
# replaced by to_line; fails unless the line occurs exactly once.
patch_binary() {
	if [ ! -x "$1" ]; then
		go test -c -o "$1" "$p" >>"$log" 2>&1 || return 1
	fi
	FROM=$from_line TO=$to_line perl -0777 -e '
		my ($in, $out) = @ARGV;
		open(my $f, "<:raw", $in) or die; local $/; my $b = <$f>; close $f;
		my ($from, $to) = ("\n$ENV{FROM}\n", "\n$ENV{TO}\n");
		die "length\n" if length($from) != length($to);
		my $i = index($b, $from);
		die "not found\n" if $i < 0 || index($b, $from, $i + 1) >= 0;
		substr($b, $i, length($from)) = $to;
		open(my $o, ">:raw", $out) or die; print $o $b; close $o; chmod 0755, $out;' "$1" "$2" >>"$log" 2>&1
}

killed=0 survived=0 invalid=0 stale=0 equiv=0 flaky=0
while IFS= read -r row <&3; do
	[[ -z "$row" || "$row" == \#* ]] && continue
	IFS=$'\t' read -r -a f <<<"$row"
	if [ "${#f[@]}" -lt 7 ]; then
		echo "bad row (need 8 tab-separated fields): $row" >&2
		exit 2
	fi
	id=${f[0]} file=${f[1]} line=${f[2]} orig=${f[3]} repl=${f[4]} pkgs=${f[5]} run=${f[6]}
	note=${f[7]:-}
	if [ "$only" != "  " ] && [[ "$only" != *" $id "* ]]; then
		continue
	fi
	[ "$repl" = "<none>" ] && repl=""
	if ! locate "$file" "$line" "$orig"; then
		stale=$((stale + 1))
		printf '%-8s stale     %s:%s: %s\n' "$id" "$file" "$line" "$why"
		continue
	fi
	[ "$where" = nearest ] && printf '%-8s note      %s:%s: %s\n' "$id" "$file" "$line" "$why"
	line=$at
	cp "$file" "$aside/orig"
	current=$file
	touched+=("$file")
	ORIG=$orig REPL=$repl LINE=$line awk '
		NR == ENVIRON["LINE"] {
			i = index($0, ENVIRON["ORIG"])
			$0 = substr($0, 1, i - 1) ENVIRON["REPL"] substr($0, i + length(ENVIRON["ORIG"]))
		}
		{ print }' "$aside/orig" >"$file"
	IFS=, read -r -a pk <<<"$pkgs"
	log="$logs/$id.log"
	fast=0
	if [[ "$file" == *.lua ]] && [ "${MUTATE_FAST:-1}" = 1 ] && patched "$line"; then
		fast=1
		cp "$file" "$aside/mutated"
		restore
		rc=0
		for p in "${pk[@]}"; do
			b="$aside/bin/$(echo "$p" | tr / _).test"
			patch_binary "$b" "$aside/mutant.test" || { rc=99; break; }
			targs=(-test.count=1 -test.failfast -test.timeout=5m)
			[ "$run" != "-" ] && targs+=(-test.run "$run")
			(cd "$p" && "$aside/mutant.test" "${targs[@]}") >>"$log" 2>&1
			rc=$?
			[ $rc -ne 0 ] && break
		done
		failbin=$b failpkg=$p
		if [ $rc -eq 99 ]; then
			# The line is not once in the binary (the same text twice): build this one.
			fast=0
			cp "$file" "$aside/orig"
			current=$file
			cp "$aside/mutated" "$file"
		fi
	fi
	if [ $fast = 0 ]; then
		failbin=""
		args=(-count=1 -failfast -timeout 5m)
		[ "$run" != "-" ] && args+=(-run "$run")
		go test "${args[@]}" "${pk[@]}" >"$log" 2>&1
		rc=$?
		restore
	fi
	if [ $rc -ne 0 ] && grep -q -e '\[build failed\]' -e '\[setup failed\]' "$log"; then
		invalid=$((invalid + 1))
		printf '%-8s invalid   %s:%s\n' "$id" "$file" "$line"
	elif [ $rc -ne 0 ]; then
		by=$(grep -m1 -o -- '--- FAIL: [^ ]*' "$log" | cut -d' ' -f3)
		# A loaded machine fails timing-bound tests now and then: the killing test must pass
		# without the mutant, or the result says flaky (run the mutant again).
		if [ -n "$failbin" ]; then
			again() { (cd "$failpkg" && "$failbin" -test.count=1 -test.run "^${by%%/*}\$"); }
		else
			again() { go test -count=1 -run "^${by%%/*}\$" "${pk[@]}"; }
		fi
		if [ -n "$by" ] && ! again >"$log.orig" 2>&1; then
			flaky=$((flaky + 1))
			printf '%-8s flaky     %s:%s %s fails without the mutant too\n' "$id" "$file" "$line" "$by"
			continue
		fi
		killed=$((killed + 1))
		printf '%-8s killed    %s:%s by %s\n' "$id" "$file" "$line" "${by:-"(exit $rc, see $log)"}"
	elif [[ "$note" == equivalent:* ]]; then
		equiv=$((equiv + 1))
		printf '%-8s equiv     %s:%s %s\n' "$id" "$file" "$line" "$note"
	else
		survived=$((survived + 1))
		printf '%-8s SURVIVED  %s:%s %s -> %s\n' "$id" "$file" "$line" "$orig" "${repl:-<none>}"
	fi
done 3<"$table"

valid=$((killed + survived + equiv))
echo "valid $valid, killed $killed, survived $survived, equivalent $equiv, invalid $invalid, stale $stale, flaky $flaky (logs: $logs)"
if [ $((valid - equiv)) -gt 0 ]; then
	echo "score $((100 * killed / (valid - equiv)))% ($killed of $((valid - equiv)) not equivalent)"
fi
if [ "${#touched[@]}" -gt 0 ] && ! git diff --quiet HEAD -- "${touched[@]}"; then
	echo "a mutated file differs from HEAD after the run:" >&2
	git diff --stat HEAD -- "${touched[@]}" >&2
	exit 1
fi
