package pipeline

// DeadWord is what a person reads for StatusFailed. A job that failed for good is "dead" in
// the CLI's and the dashboard's tables, headings and help texts, and so is the set it sits
// in. "failed" stays its status on the wire (JSON, the API's status values), which
// scripts depend on. Wherever a status is given, "dead" is accepted as an alias of it
// (ParseStatus).
const DeadWord = "dead"

// ParseStatus reads a status as a person gives it: "dead" is StatusFailed; any other text is
// taken as it is (Inspector.List refuses an unknown one).
func ParseStatus(s string) Status {
	if s == DeadWord {
		return StatusFailed
	}
	return Status(s)
}

// StatusWord is how a person reads status s: "dead" for StatusFailed, the status itself
// otherwise.
func StatusWord(s Status) string {
	if s == StatusFailed {
		return DeadWord
	}
	return string(s)
}

// AttemptWord is how a person reads an attempt's outcome (JobAttempt.Outcome): "dead" for
// AttemptFailed, the attempt that sent the job to the dead set, as the job's status reads;
// the outcome itself otherwise. "failed" stays the outcome on the wire (JSON).
func AttemptWord(outcome string) string {
	if outcome == AttemptFailed {
		return DeadWord
	}
	return outcome
}
