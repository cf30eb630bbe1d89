#!/usr/bin/env bash
# Mutation driver: applies one-line mutants from a table one at a time, runs the tests of the
# packages the table names for each, and prints whether the tests killed it.
#
#   bash scripts/mutate.sh [TABLE] [ID...]     (TABLE defaults to scripts/mutants.tsv)
#
# TABLE is tab-separated, '#' starts a comment line, 8 fields a mutant:
#   id  file  line  original  replacement  packages  run  note
# The original is text found on that line; its first occurrence is replaced. The mutant is
# refused as stale when the line does not hold it. Replacement '<none>' deletes it. Packages are
# comma-separated ('./internal/jobstate,./pipeline'). Run is a -run regexp, '-' for all tests.
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
table=${1:-scripts/mutants.tsv}
shift || true
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
	cp "$file" "$aside/orig"
	current=$file
	touched+=("$file")
	# ENVIRON, not -v: awk would read backslashes in -v values as escapes.
	if ! ORIG=$orig REPL=$repl LINE=$line awk '
		NR == ENVIRON["LINE"] {
			i = index($0, ENVIRON["ORIG"])
			if (i == 0) { bad = 1 } else {
				$0 = substr($0, 1, i - 1) ENVIRON["REPL"] substr($0, i + length(ENVIRON["ORIG"]))
			}
		}
		{ print }
		END { exit bad || NR < ENVIRON["LINE"] }' "$aside/orig" >"$file"; then
		restore
		stale=$((stale + 1))
		printf '%-8s stale     %s:%s does not hold the original text\n' "$id" "$file" "$line"
		continue
	fi
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
