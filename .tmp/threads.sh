#!/bin/bash
# usage: threads.sh LOG  -- waits for app pid in LOG, then samples thread CPU every 5 s
LOG=$1
while ! grep -q "server app (pid" $LOG 2>/dev/null; do sleep 0.2; done
PID=$(grep -o "server app (pid [0-9]*" $LOG | grep -o "[0-9]*$")
snap() { for t in /proc/$PID/task/*; do n=$(cat $t/comm); s=$(awk '{print $14+$15}' $t/stat); echo "$n $s"; done | awk '{a[$1]+=$2} END {for (k in a) printf "%s=%d ", k, a[k]; print ""}'; }
while kill -0 $PID 2>/dev/null; do echo "$(date +%T) $(snap)"; sleep 3; done
