package repair

// PlanHarep is a temporary stand-in until the harep branch lands.
func PlanHarep(in HarepInput) HarepPlan { return HarepPlan{} }
