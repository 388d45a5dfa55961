# tests/cli/deepep_lib.sh -- the hand-computed DeepEP fixture of deepep_acct.sh, deepep_sim.sh
# and compare_time.sh (sourced after lib.sh): 12 ranks as 3 nodes x 4, expert e on rank e
# (p.moep), the same with experts 4 and 5 both on rank 4 (q.moep, rank 5 holds none), and one
# layer of top-3 tokens: a (from rank 0 to experts 4, 5, 9), b (from rank 1, the same
# experts), c (from rank 4 to 0, 1, 5), and ab, abc their concatenations.

# deepep_fixtures HIDDEN: write them into $T, the traces at HIDDEN bf16 elements a vector
deepep_fixtures() {
    {
        printf '@PL\tVN:1.0\tlayers:1\texperts:12\tranks:12\tgpus_per_node:4\tcapacity:2\n'
        printf '#layer\texpert\tranks\n'
        for e in 0 1 2 3 4 5 6 7 8 9 10 11; do printf '0\t%d\t%d\n' $e $e; done
    } >"$T/p.moep"
    sed 's/^0	5	5$/0	5	4/' "$T/p.moep" >"$T/q.moep"
    _h="@MT\tVN:1.0\tlayers:1\texperts:12\ttopk:3\thidden:$1\telem_bytes:2\tranks:12\tweights:0\n"
    # token seq pos step rank cell
    printf "$_h"'0\t0\t0\t0\t0\t4,5,9\n' >"$T/a.txt"
    printf "$_h"'1\t1\t0\t0\t1\t4,5,9\n' >"$T/b.txt"
    printf "$_h"'2\t2\t0\t0\t4\t0,1,5\n' >"$T/c.txt"
    cat "$T/a.txt" >"$T/ab.txt"
    tail -n 1 "$T/b.txt" >>"$T/ab.txt"
    cat "$T/ab.txt" >"$T/abc.txt"
    tail -n 1 "$T/c.txt" >>"$T/abc.txt"
}
