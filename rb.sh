p=$1
q() { read -r q0 _ < /proc/$$/schedstat; echo "$1 $(( (q0 - q1) / 1000 / 100 )) us/iter"; read -r q1 _ < /proc/$$/schedstat; }
read -r q1 _ < /proc/$$/schedstat
i=0; while [ $i -lt 100 ]; do i=$((i+1)); x=; read -r -N 65536 x 2>/dev/null < /proc/$p/smaps_rollup; done; q rollup-read
i=0; while [ $i -lt 100 ]; do i=$((i+1)); x=; read -r -N 65536 x 2>/dev/null < /proc/$p/status; done; q status-read
