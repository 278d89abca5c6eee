"""steplog.py - the sequence twins' step log, in the words of gpudl's examples (ex_steplog):
each step's loss and time summed until the next report, "step N: loss" every log_interval
steps, and the median step time without the first three steps (which warm up)."""
import statistics


class StepLog:
    def __init__(self, steps, log_interval, eval_interval):
        self.steps, self.log_interval, self.eval_interval = steps, log_interval, eval_interval
        self.times = []
        self.reset()

    def reset(self):
        """Zeroes the sums after a report."""
        self.total, self.secs, self.rows = 0.0, 0.0, 0

    def add(self, step, value, seconds):
        """One step's loss and time; True when a report is due (every eval_interval steps and the last)."""
        self.times.append(seconds)
        self.secs += seconds
        self.total += value
        self.rows += 1
        if step % self.log_interval == 0:
            print(f"step {step}: loss {value:.6f}")
        return step % self.eval_interval == 0 or step == self.steps

    def median(self):
        """The median step time, printed as the "median step time" line."""
        first = 3 if self.steps > 3 else 0
        med = statistics.median(self.times[first:])
        print(f"median step time {1e3 * med:.2f} ms (steps {first + 1} to {self.steps})")
        return med
