p=$1
q() { read -r q0 _ < /proc/$$/schedstat; echo "$1 $(( (q0 - q1) / 1000 / $2 )) us/iter"; read -r q1 _ < /proc/$$/schedstat; }
exec 3<>nap
read -r q1 _ < /proc/$$/schedstat
i=0; while [ $i -lt 100 ]; do i=$((i+1)); read -t 0.02 -u3 _x; done; q sleep-only 100
i=0; while [ $i -lt 100 ]; do i=$((i+1)); read -t 0.02 -u3 _x; x=; read -r -N 65536 x 2>/dev/null < /proc/$p/status; x=; read -r -N 4096 x 2>/dev/null < /proc/$p/stat; x=${x#*') '}; set -f; set -- $x; set +f; done; q sleep+tk 100
i=0; while [ $i -lt 100 ]; do i=$((i+1)); sleep 0.02; done; q toybox-sleep 100
