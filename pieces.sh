p=$1
q() { read -r q0 _ < /proc/$$/schedstat; echo "$1 $(( (q0 - q1) / 1000 / 1000 )) us/iter"; read -r q1 _ < /proc/$$/schedstat; }
read -r q1 _ < /proc/$$/schedstat
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); done; q empty
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); x=; read -r -N 65536 x 2>/dev/null < /proc/$p/status; done; q status
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); x=; read -r -N 4096 x 2>/dev/null < /proc/$p/stat; done; q stat
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); x=; read -r -N 4096 x 2>/dev/null < /proc/$p/stat; x=${x#*') '}; set -f; set -- $x; set +f; done; q statsplit
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); read -r -N 64 u < /proc/uptime; u=${u%% *}; done; q uptime
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); [ -d /proc/$p ]; done; q dtest
exec 3<>nap
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); read -t 0.0001 -u3 _x; done; q readt
i=0; while [ $i -lt 1000 ]; do i=$((i+1)); read -r -N 4096 x 2>/dev/null < /proc/$p/schedstat; done; q schedstat
