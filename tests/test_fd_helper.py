"""The shared finite-difference helper must accept right Jacobians and reject wrong ones."""
import numpy as np
import pytest

from mbfg.testing import check_jacobian, numerical_jacobian


def f(x):
    return np.array([np.sin(x[0]) * x[1], x[0] ** 2 + np.exp(x[1]), 3.0 * x[1]])


def jac(x):
    return np.array([[np.cos(x[0]) * x[1], np.sin(x[0])],
                     [2 * x[0], np.exp(x[1])],
                     [0.0, 3.0]])


def test_accepts_correct_jacobian():
    x = np.array([0.3, -1.2])
    assert check_jacobian(f, x, jac(x)) < 1e-9


@pytest.mark.parametrize("corrupt", ["sign", "small", "shape"])
def test_rejects_wrong_jacobian(corrupt):
    x = np.array([0.3, -1.2])
    J = jac(x)
    if corrupt == "sign":
        J[0, 1] = -J[0, 1]
    elif corrupt == "small":
        J[1, 0] *= 1.0 + 1e-4  # a 1e-4 relative mistake must still be caught
    else:
        J = J[:, :1]
    with pytest.raises(AssertionError):
        check_jacobian(f, x, J)


def test_matrix_valued_function_shape():
    A = np.arange(6.0).reshape(2, 3)
    J = numerical_jacobian(lambda x: np.outer(A @ x, x[:2]), np.ones(3))
    assert J.shape == (2, 2, 3)
