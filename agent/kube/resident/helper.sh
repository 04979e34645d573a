# probed's resident exec helper, protocol 1 (agent/kube/resident; docs/cluster.md "The resident
# exec helper"). probed starts it once per container through the CRI's streaming Exec as
#   sh -c BOOT probed-exec-helper
# and sends this text on its stdin, ended by a line ".". It needs a POSIX sh, cat and /proc; it
# writes no file. Its three processes: this shell (H), the reader (rd: requests from probed,
# kills) and the runner (rn: one command at a time).
#
# stdin (from probed), one line each:
#   xpath=P; fix=F      once, after the environment dumps (shell code, each value quoted): P
#                       is the exec's PATH (for finding commands as runc does), F makes a
#                       command's environment the exec's own (undoes what the shell changed)
#   TOKEN 'arg' ...     run a command: each argument single-quoted, a newline as '"$nl"'
#   k                   kill what the current run started (its timeout passed)
# stdout (to probed): the exec's environment (/proc/$$/environ) then "\036e0\n", a child's then
#   "\036e1\n", "\036ready 1 PID:STARTTIME...\n" (this shell's, rd's, rn's); per run the command's stdout then
#   "\036TOKEN STATUS\n" (STATUS: exit code; k: killed; n: not found; p: not executable).
# stderr (to probed): per run the command's stderr then "\036TOKEN\n".
nl='
'
command -v cat >/dev/null 2>&1 || { printf '\036unsupported no cat in PATH\n'; exit 0; }
[ -r /proc/$$/environ ] || { printf '\036unsupported /proc/%s/environ is not readable\n' "$$"; exit 0; }
cat /proc/$$/environ </dev/null 2>/dev/null; printf '\036e0\n'
cat /proc/self/environ </dev/null 2>/dev/null; printf '\036e1\n'
IFS= read -r l || exit 0
eval "$l"

# ps_: every live process (zombies left out) as "pid:ppid" in $t.
ps_() {
	t=
	for d in /proc/[0-9]*; do
		IFS= read -r s 2>/dev/null <"$d/stat" || continue
		p=${s%% *}
		s=${s##*) }
		set -- $s
		[ "$1" = Z ] || t="$t $p:$2"
	done
}

# desc ROOT: the descendants of ROOT in $t into $all, its children into $first.
desc() {
	all= first=
	l=" $1 "
	while :; do
		k=
		for e in $t; do
			case $l in *" ${e#*:} "*) k="$k ${e%%:*}" ;; esac
		done
		[ -n "$k" ] || return 0
		[ -n "$first" ] || first=$k
		all="$all$k"
		l="$k "
	done
}

# reap ROOT OUT ERR [all]: SIGKILL what the run under way started — the descendants of ROOT
# (the runner), and whatever else holds the run's output pipes (a child of the command that
# left its session) — until none is left, then the run's readers (the cats, which end by
# themselves once the writers are gone). The readers are the processes whose stdout is the
# helper's stdout or stderr (OUT, ERR: /proc paths of them, pipes; else only descendants are
# found) and whose stdin is a pipe. The run's own shells, which hold the stdout of ROOT's
# child (the run's status pipe, or its stdout pipe with pipefail) as fd 7, are spared: they
# end, reaped by their parents, once the command is gone, and the runner then reports the
# run. With "all" (a helper that stopped answering), ROOT and everything under it too. Never
# this shell's own processes ($$, $keep), nor PID 1. What forks while it looks is found next
# time (at most 50 rounds).
reap() {
	ro=$2 re=$3 n=0 readers=
	{ [ -p "$ro" ] && [ -p "$re" ]; } || ro= re=
	while [ $n -lt 50 ]; do
		ps_
		desc "$1"
		spare= readers= pipes= v=$all
		[ -n "$4" ] && case "$t " in *" $1:"*) v="$v $1" ;; esac
		if [ -z "$4" ]; then
			for c in $first; do
				for p in $all; do
					[ /proc/$p/fd/7 -ef /proc/$c/fd/1 ] && spare="$spare $p"
				done
			done
		fi
		for x in $t; do
			[ -n "$ro" ] || break
			p=${x%%:*}
			case " $$ $keep 1 $1 $spare " in *" $p "*) continue ;; esac
			if { [ /proc/$p/fd/1 -ef $ro ] || [ /proc/$p/fd/1 -ef $re ]; } && [ -p /proc/$p/fd/0 ]; then
				readers="$readers $p"
				pipes="$pipes /proc/$p/fd/0"
			fi
		done
		for x in $t; do
			[ -n "$pipes" ] || break
			p=${x%%:*}
			for q in $pipes; do
				for f in 0 1 2; do [ /proc/$p/fd/$f -ef $q ] && v="$v $p"; done
			done
		done
		[ -n "$4" ] && v="$v $readers"
		w=
		for p in $v; do
			case " $$ $keep 1 $spare " in *" $p "*) continue ;; esac
			[ -n "$4" ] || case " $readers " in *" $p "*) continue ;; esac
			w="$w $p"
		done
		[ -n "$w" ] || break
		kill -9 $w 2>/dev/null
		n=$((n + 1))
	done
	[ -z "$readers" ] || kill -9 $readers 2>/dev/null
}

# found CMD: whether the exec would find CMD as runc does (Go's exec.LookPath with the
# container's PATH), its path then in $xp; else $why is n (not found) or p (not executable).
found() {
	case $1 in
	*/*)
		if [ -d "$1" ]; then why=p; return 1; fi
		[ -f "$1" ] || { why=n; return 1; }
		[ -x "$1" ] || { why=p; return 1; }
		xp=$1
		return 0
		;;
	esac
	why=n
	set -f
	ifs=$IFS
	IFS=:
	for d in $xpath; do
		[ -n "$d" ] || d=.
		if [ -f "$d/$1" ] && [ -x "$d/$1" ]; then
			IFS=$ifs
			set +f
			xp=$d/$1
			return 0
		fi
	done
	IFS=$ifs
	set +f
	return 1
}

# xa: exec -a works here (bash, busybox ash). Then a command runs from the path found, named
# as given (as runc's execve does): a busybox built to prefer its applets would otherwise run
# its own applet for a name that is a file in PATH.
xa=
(exec -a probed true) 2>/dev/null && xa=1

# pf: the shell has pipefail (busybox ash, bash): a pipeline's status is then its command's,
# which saves the two shells that carry it otherwise (a run costs 4 forks instead of 6).
pf=
(set -o pipefail) 2>/dev/null && pf=1

# run TOKEN ARG...: one command. It runs as a fresh subshell replaced by the command (nothing of
# an earlier run is left in it: no cd, no variable), with stdin /dev/null, the exec's
# environment ($fix) and stdout and stderr on two pipes of its own; a cat reads each into the
# helper's stdout or stderr, so the run ends when the command has exited and nothing holds its
# output any more (as ExecSync waits for the exec's output to close). The exit status is the
# pipelines' (pipefail), else it comes back through fd 7 and a command substitution. The
# shells of the run hold fd 7 (reap spares them).
run() {
	tok=$1
	shift
	if ! found "$1"; then
		rc=$why
	elif [ -n "$pf" ]; then
		{ (eval "$fix"; start "$@" 2>&5 5>&-) </dev/null 3>&- 4>&- 7>&- 5>&1 >&6 6>&- 2>/dev/null | exec cat >&4 6>&- 7>&-; } </dev/null 6>&1 7>&1 2>/dev/null | exec cat >&3 7>&-
		rc=$?
	else
		rc=$({ { { (eval "$fix"; start "$@" 2>&5 5>&-) </dev/null 3>&- 4>&- 7>&-; echo "$?" >&7; } 5>&1 >&6 6>&- 2>/dev/null | exec cat >&4 6>&- 7>&-; } 6>&1 | exec cat >&3 7>&-; } </dev/null 7>&1)
	fi
	printf '\036%s\n' "$tok" >&4
	printf '\036%s %s\n' "$tok" "${rc:-k}" >&3
}

# start CMD ARG...: replaces this subshell with the command (found's $xp).
start() {
	if [ -n "$xa" ]; then
		a0=$1
		shift
		exec -a "$a0" "$xp" "$@"
	fi
	exec "$@"
}

# id PID: "PID:STARTTIME", a process's identity (a PID is reused, not with its start time).
id() {
	IFS= read -r s </proc/$1/stat || return 0
	p=${s%% *}
	s=${s##*) }
	set -- $s
	printf '%s:%s' "$p" "${20}"
}

rn() {
	exec 3>&1 4>&2
	[ -z "$pf" ] || set -o pipefail
	IFS= read -r s </proc/self/stat
	me=${s%% *}
	ps_
	desc "$$"
	ids=
	for p in $$ $first; do ids="$ids $(id $p)"; done
	printf '\036ready 1%s\n' "$ids"
	while IFS= read -r req; do
		eval "set -- $req"
		run "$@"
	done
}

rd() {
	keep=
	while IFS= read -r req; do
		case $req in
		k) reapRun ;;
		*) printf '%s\n' "$req" ;;
		esac
	done
	# probed went away (its connection closed the exec's stdin): end the run under way.
	reapRun
}

# reapRun: reap the runner's descendants. The runner is the process reading this reader's
# stdout pipe (the runner never redirects its own stdin); it and this reader are $keep, never
# killed (found once). The helper's stdout and stderr are the runner's fd 3 and 4.
reapRun() {
	if [ -z "$keep" ]; then
		IFS= read -r s </proc/self/stat
		keep=${s%% *}
		ps_
		for x in $t; do
			p=${x%%:*}
			[ "$p" != "$keep" ] && [ /proc/$p/fd/0 -ef /proc/$keep/fd/1 ] && rnp=$p
		done
		keep="$keep $rnp"
	fi
	[ -z "$rnp" ] || reap "$rnp" /proc/$rnp/fd/3 /proc/$rnp/fd/4
}

rd | rn
