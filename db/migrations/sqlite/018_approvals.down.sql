DROP TABLE approval_decisions;
DROP TABLE approval_requests;
DROP TABLE approval_policies;
