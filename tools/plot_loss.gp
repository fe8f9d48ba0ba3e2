# plot_loss.gp — training curves for tools/plot: loss (and val_loss), learning rate, gradient norm and
# throughput against step. Variables from tools/plot: term, out, train, val, hasval, title.
set terminal @term
set output out
set multiplot layout 2,2 title title
set grid
set key top right
set xlabel "step"
set title "loss"
set ylabel "cross-entropy"
if (hasval) {
  plot train using 1:2 with lines lw 2 title "train loss", val using 1:2 with linespoints lw 2 pt 7 title "val loss"
} else {
  plot train using 1:2 with lines lw 2 title "train loss"
}
set title "learning rate"
set ylabel "lr"
set format y "%.1e"
plot train using 1:3 with lines lw 2 notitle
set format y "%g"
set title "gradient norm (before clipping)"
set ylabel "||g||"
plot train using 1:4 with lines lw 2 notitle
set title "throughput"
set ylabel "tokens/s"
plot train using 1:5 with lines lw 2 notitle
unset multiplot
