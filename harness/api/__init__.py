"""What a property is written with: @checks markers, Trial (inputs, calls, oracle, comparisons),
the evidence a failure carries, observation of weights, blocked and regime cases, the repro."""
