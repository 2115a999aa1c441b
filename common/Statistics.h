#pragma once
// Robust statistics of small sets of numbers, for the result screen and the benchmarks.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace flotilla {

// The median; the mean of the two middle values for an even count, 0 for none.
inline double median(std::vector<double> values)
{
    if (values.empty())
        return 0.0;
    const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), mid, values.end());
    if (values.size() % 2 == 1)
        return *mid;
    const double upper = *mid;
    const double lower = *std::max_element(values.begin(), mid);
    return 0.5 * (lower + upper);
}

// The median of the absolute deviations from center.
inline double medianAbsoluteDeviation(const std::vector<double> &values, double center)
{
    std::vector<double> deviations;
    deviations.reserve(values.size());
    for (const double v : values)
        deviations.push_back(std::abs(v - center));
    return median(std::move(deviations));
}

} // namespace flotilla
