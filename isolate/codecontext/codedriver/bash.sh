# The driver of a Bash code context (isolate/codecontext/codecontext.go), run as
# `bash --norc --noprofile -c SOURCE`. It evaluates each request's code in
# this one shell: variables, functions, aliases and the working directory
# live as long as the process.
#
# A request, on stdin, is a line "NONCE LIMIT CODE_BYTES CWD_BYTES N_ENV
# STREAM",
# the code, the cwd, then N_ENV times a line with a length and that many
# bytes of NAME=VALUE (the service refuses NUL bytes in them). Frames leave
# on stdout as the other drivers' do (python.py): one type byte, a 4-byte
# big-endian length, the payload. The code's fds 1 and 2 are files: with
# STREAM 1 what they gain comes as it is written (_isolate_stream), else
# they come back when the code ends, whole up to LIMIT bytes or the first
# and the last half of LIMIT with an s frame "o N" (or "e N") of the N
# bytes between them skipped. A non-zero status of the code's last command
# is the error {"name": "ExitStatus"}.

exec {_isolate_chan}>&1
_isolate_dir=$(mktemp -d) || exit 1
_isolate_count=0
_isolate_running=0
_isolate_interrupted=0

_isolate_frame() { # kind payload
	local LC_ALL=C head
	local n=${#2}
	printf -v head '\\%03o\\%03o\\%03o\\%03o' $((n >> 24 & 255)) $((n >> 16 & 255)) $((n >> 8 & 255)) $((n & 255))
	printf "$1$head%s" "$2" >&"$_isolate_chan"
}

_isolate_file_frame() { # kind file limit: the file whole, or its head, an s frame "KIND N" of the bytes skipped, its tail
	local LC_ALL=C n
	[[ -s $2 ]] || return 0
	n=$(wc -c <"$2")
	if ((n <= $3)); then
		_isolate_bytes_frame "$1" "$n" head -c "$n" "$2"
	else
		_isolate_bytes_frame "$1" $(($3 - $3 / 2)) head -c $(($3 - $3 / 2)) "$2"
		_isolate_frame s "$1 $((n - $3))"
		(($3 / 2 > 0)) && _isolate_bytes_frame "$1" $(($3 / 2)) tail -c $(($3 / 2)) "$2"
	fi
	return 0
}

_isolate_bytes_frame() { # kind length command...: a frame of the command's output, of that length
	local LC_ALL=C head n=$2 kind=$1
	((n > 0)) || return 0
	shift 2
	printf -v head '\\%03o\\%03o\\%03o\\%03o' $((n >> 24 & 255)) $((n >> 16 & 255)) $((n >> 8 & 255)) $((n & 255))
	printf "$kind$head" >&"$_isolate_chan"
	"$@" >&"$_isolate_chan"
}

# While the code of a streamed call runs: what its files o and e gained, as
# frames, every tenth of a second and a last time once the file stop
# exists; then a line on the fifo done. It is no job of the shell's (the
# code's own `wait` never waits for it), the one writer of frames while the
# code runs, and deaf to the interrupts the code gets.
_isolate_stream() {
	trap '' INT
	local LC_ALL=C sent_o=0 sent_e=0 last=0 tick
	exec {tick}<>"$_isolate_dir/tick"
	while :; do
		[[ -e $_isolate_dir/stop ]] && last=1
		_isolate_stream_file o sent_o
		_isolate_stream_file e sent_e
		((last)) && break
		read -r -t 0.1 -u "$tick" # a sleep with no process started
	done
	echo >"$_isolate_dir/done"
}

_isolate_stream_file() { # kind name-of-its-count-sent: the file's bytes past the count, as frames
	local -n sent=$2
	local n k f=$_isolate_dir/$1
	n=$(wc -c <"$f") || return 0
	while ((n > sent)); do
		# A frame of at most 1 MiB, of what was copied: the file may grow on.
		k=$((n - sent > 1048576 ? 1048576 : n - sent))
		tail -c +$((sent + 1)) "$f" | head -c "$k" >"$f.chunk"
		k=$(wc -c <"$f.chunk")
		((k > 0)) || return 0
		_isolate_bytes_frame "$1" "$k" cat "$f.chunk"
		((sent += k))
	done
}

# The service interrupts the code at a call's timeout with SIGINT (to the
# whole process group: the command running in the foreground gets it too)
# and sends it again until told it was taken. While the code runs, the trap
# returns from the function it runs in, and a DEBUG trap (functions
# inheriting it: set -T) returns from every function the code is in before
# its next command: the code stops, loops of builtins and functions of its
# own included, up to _isolate_eval; then the driver says it took it.
trap '_isolate_interrupted=1
if ((_isolate_running)); then
	set -T
	trap '"'"'[[ ${FUNCNAME[0]-} ]] && return 130'"'"' DEBUG
	return 130
fi' INT

_isolate_eval() {
	eval "$_isolate_code"
	local st=$?
	_isolate_running=0
	return $st
}

_isolate_read() { # reads one request into _isolate_*; false at the end of requests
	local LC_ALL=C n st i line
	while :; do
		IFS=' ' read -r _isolate_nonce _isolate_limit _isolate_clen _isolate_cwdlen _isolate_nenv _isolate_streamed && break
		st=$?
		((st > 128)) || return 1 # the end of requests, not a signal
	done
	_isolate_code= _isolate_cwd=
	_isolate_env=()
	((_isolate_clen > 0)) && { read -r -d '' -N "$_isolate_clen" _isolate_code || [[ ${#_isolate_code} == "$_isolate_clen" ]] || return 1; }
	((_isolate_cwdlen > 0)) && { read -r -d '' -N "$_isolate_cwdlen" _isolate_cwd || return 1; }
	for ((i = 0; i < _isolate_nenv; i++)); do
		read -r n || return 1
		read -r -d '' -N "$n" line || [[ ${#line} == "$n" ]] || return 1
		_isolate_env+=("$line")
	done
	return 0
}

_isolate_frame k ""
while _isolate_read; do
	_isolate_frame b "$_isolate_nonce"
	((_isolate_count++))
	_isolate_interrupted=0
	_isolate_saved=()
	for _isolate_kv in "${_isolate_env[@]}"; do
		_isolate_name=${_isolate_kv%%=*}
		if [[ -v $_isolate_name ]]; then
			_isolate_saved+=("$_isolate_name=${!_isolate_name}")
		else
			_isolate_saved+=("$_isolate_name")
		fi
		export "$_isolate_kv" 2>/dev/null
	done
	_isolate_before=$PWD
	_isolate_status=0
	if [[ -n $_isolate_cwd ]] && ! cd -- "$_isolate_cwd" 2>"$_isolate_dir/e"; then
		_isolate_status=1
	else
		[[ -d $_isolate_dir ]] || mkdir -p -- "$_isolate_dir"
		if ((_isolate_streamed)); then
			rm -f -- "$_isolate_dir/stop" "$_isolate_dir/done" "$_isolate_dir/tick"
			mkfifo -- "$_isolate_dir/done" "$_isolate_dir/tick" && : >"$_isolate_dir/o" && : >"$_isolate_dir/e" || _isolate_streamed=0
		fi
		((_isolate_streamed)) && (_isolate_stream &)
		_isolate_running=1
		_isolate_eval </dev/null >"$_isolate_dir/o" 2>"$_isolate_dir/e"
		_isolate_status=$?
		trap - DEBUG
		set +T
		_isolate_running=0
		if ((_isolate_streamed)); then
			: >"$_isolate_dir/stop"
			read -r -t 10 <>"$_isolate_dir/done"
		fi
		((_isolate_interrupted)) && _isolate_frame i ""
	fi
	for _isolate_kv in "${_isolate_saved[@]}"; do
		if [[ $_isolate_kv == *=* ]]; then
			export "$_isolate_kv"
		else
			unset "$_isolate_kv"
		fi
	done
	[[ -n $_isolate_cwd ]] && cd -- "$_isolate_before" 2>/dev/null
	if ! ((_isolate_streamed)); then
		_isolate_file_frame o "$_isolate_dir/o" "$_isolate_limit"
		_isolate_file_frame e "$_isolate_dir/e" "$_isolate_limit"
	fi
	: >"$_isolate_dir/o"
	: >"$_isolate_dir/e"
	if ((_isolate_interrupted)); then
		_isolate_frame x '{"name": "Interrupted", "value": "interrupted at the call'"'"'s end (exit status '"$_isolate_status"')", "traceback": ""}'
	elif ((_isolate_status != 0)); then
		_isolate_frame x '{"name": "ExitStatus", "value": "exit status '"$_isolate_status"'", "traceback": ""}'
	fi
	_isolate_frame d '{"execution_count": '"$_isolate_count"', "nonce": "'"$_isolate_nonce"'"}'
done
rm -rf -- "$_isolate_dir"
