/* period.c - the dominant period of a binned event series by autocorrelation (sim waves, sluice overlay). */
#include "sim.h"

/* Why autocorrelation: a wave of 429s every P seconds makes the series look like
 * itself shifted by P bins, whatever the waves' shape or height, and the sample
 * autocorrelation (normalised by the whole series' variance, so that long lags with
 * few overlapping bins score lower) peaks at the first such shift. The thresholds
 * keep noise from being reported: at least 10 events and 12 bins, the lag searched
 * from 2 bins to a third of the series (three periods seen), a peak of 0.25. */
sl_sim_period_t sl_sim_dominant_period(const double *counts, size_t n, double bin_s)
{
    sl_sim_period_t p = {.period_s = -1, .bin_s = bin_s, .min_lag_s = 2 * bin_s,
                         .max_lag_s = (double)(n / 3) * bin_s};
    double total = 0;
    for (size_t i = 0; i < n; i++) total += counts[i];
    p.events = total;
    if (total < 10 || n < 12) return p;
    double mean = total / (double)n, var = 0;
    for (size_t i = 0; i < n; i++) var += (counts[i] - mean) * (counts[i] - mean);
    if (var <= 0) return p;
    double best = 0;
    size_t best_lag = 0;
    for (size_t lag = 2; lag <= n / 3; lag++) {
        double s = 0;
        for (size_t i = 0; i + lag < n; i++) s += (counts[i] - mean) * (counts[i + lag] - mean);
        double r = s / var;
        if (r > best) {
            best = r;
            best_lag = lag;
        }
    }
    p.peak = best;
    if (best >= 0.25) p.period_s = (double)best_lag * bin_s;
    return p;
}
