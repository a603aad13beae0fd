"""The defect zoo: implementations each wrong in one way a user could write (wrong.py, declared.py), the
correct zoo written in unusual but legitimate ways (correct.py), and the run that checks both (run.py)."""
