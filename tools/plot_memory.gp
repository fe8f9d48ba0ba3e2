# plot_memory.gp — per-rank memory over time for tools/plot, stacked by allocator category (columns
# 2..9 of data are cumulative sizes in `unit` (KiB, MiB or GiB) in the order master, optim, grad_shard, param_full, main_grad,
# activation, comm, other). Variables from tools/plot: term, out, data, unit, title.
set terminal @term
set output out
set title title
set xlabel "time (ms)"
set ylabel unit." held (stacked by category)"
set grid
set key outside right top
set style fill solid 0.85 noborder
cats = "master optim grad_shard param_full main_grad activation comm other"
colors = "#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f"
# Topmost band first so each lower band paints over the one beneath it.
plot for [i=8:1:-1] data using 1:(column(i+1)) with filledcurves x1 lc rgb word(colors, i) title word(cats, i)
