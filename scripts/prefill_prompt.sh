# Sourced by bench_prefill_cpu.sh and bench_prefill_alone.sh: the prompts both time.
# N words that are one token each, from a fixed pseudo-random sequence.
prompt_of() {
  awk -v n="$1" 'BEGIN {
    split("the of and to in is was for on that with as by at from his it an were are which this be or has had first one their its new after but who not they have her she two been other when there all during into school time may years more most only over city some world would where later up such used many can state about national out known university united then made", w, " ");
    nw = length(w); s = 12345; out = "";
    for (i = 0; i < n; i++) { s = (s * 1103515245 + 12345) % 2147483648; out = out (i ? " " : "") w[1 + int(s / 65536) % nw] }
    print out }'
}
